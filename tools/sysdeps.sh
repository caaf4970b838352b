#!/usr/bin/env bash
# System packages the tests use: mosquitto (real MQTT broker), chromium (the web interface's browser tests).
# Installed with apt-get when missing and we may (root, or sudo without a password); otherwise say what is missing
# (the MQTT tests then use amqtt; the browser tests are skipped without chromium).
set -u
need=()
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || need+=(mosquitto)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
[ -x /usr/bin/chromium ] || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else
  echo "note: missing system packages: ${need[*]} (install them with apt-get for the full test set)"; exit 0
fi
echo "installing system packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null && $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
  || echo "warning: apt-get could not install ${need[*]}"
exit 0
