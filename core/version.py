"""Firmware version, reported by /system/alive, /system/info, MQTT discovery and SunSpec model 1."""

VERSION = "0.1.0"
