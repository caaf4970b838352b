#!/usr/bin/env bash
# A real Home Assistant Core for tests/test_ha_core_upgrade.py: Core 2025.4.4 on pyenv's Python 3.13.0, pinned by
# its own homeassistant/package_constraints.txt, with the requirements of the integrations a headless start with
# MQTT and the recorder sets up (tools/ha_core_reqs.py). Cached: a second run only checks the stamp and exits.
# Prints the venv's path on the last line. HA_CORE_CACHE overrides the cache folder, HA_CORE_PYTHON the interpreter.
set -euo pipefail
HA_VERSION=2025.4.4
PY_VERSION=3.13.0
here="$(cd "$(dirname "$0")" && pwd)"
cache="${HA_CORE_CACHE:-$HOME/.cache/meterplus/ha-core-$HA_VERSION}"
venv="$cache/venv"
stamp="$cache/ready"
extra=(mqtt recorder history api http websocket_api shelly)   # shelly: issue 39's peer (aioshelly)

if [ -f "$stamp" ] && [ -x "$venv/bin/hass" ] && [ "$(cat "$stamp")" = "$HA_VERSION ${extra[*]}" ]; then
  echo "$venv"
  exit 0
fi

py="${HA_CORE_PYTHON:-}"
if [ -z "$py" ]; then
  root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
  py="$root/versions/$PY_VERSION/bin/python3"
fi
if [ ! -x "$py" ] || [ "$("$py" -c 'import platform; print(platform.python_version())')" != "$PY_VERSION" ]; then
  echo "ha_core_env: Python $PY_VERSION not found at $py (pyenv install $PY_VERSION, or set HA_CORE_PYTHON)" >&2
  exit 1
fi

if [ -x "$venv/bin/hass" ] && [ -f "$cache/package_constraints.txt" ] && [ -f "$cache/core-installed" ] \
   && [ "$("$venv/bin/hass" --version)" = "$HA_VERSION" ]; then
  # Core is there and only the integration list changed: install what the new list needs, not Core again
  echo "ha_core_env: adding integration requirements to Home Assistant Core $HA_VERSION in $cache" >&2
  "$venv/bin/python" "$here/ha_core_reqs.py" "${extra[@]}" > "$cache/integration_requirements.txt"
  "$venv/bin/python" -m pip install -q -c "$cache/package_constraints.txt" -r "$cache/integration_requirements.txt" >&2
  echo "$HA_VERSION ${extra[*]}" > "$stamp"
  echo "$venv"
  exit 0
fi

echo "ha_core_env: building Home Assistant Core $HA_VERSION on Python $PY_VERSION in $cache" >&2
rm -rf "$cache"
mkdir -p "$cache/dl"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip download -q --no-deps "homeassistant==$HA_VERSION" -d "$cache/dl" >&2
wheel="$(ls "$cache"/dl/homeassistant-"$HA_VERSION"-*.whl)"
"$venv/bin/python" - "$wheel" "$cache/package_constraints.txt" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("homeassistant/package_constraints.txt"))
PY
"$venv/bin/python" -m pip install -q -c "$cache/package_constraints.txt" "$wheel" >&2
touch "$cache/core-installed"
"$venv/bin/python" "$here/ha_core_reqs.py" "${extra[@]}" > "$cache/integration_requirements.txt"
"$venv/bin/python" -m pip install -q -c "$cache/package_constraints.txt" -r "$cache/integration_requirements.txt" >&2
test "$("$venv/bin/hass" --version)" = "$HA_VERSION"
echo "$HA_VERSION ${extra[*]}" > "$stamp"
echo "$venv"
