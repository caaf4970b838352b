"""Network services: mDNS advertising, the captive-portal DNS, Improv provisioning over BLE."""
