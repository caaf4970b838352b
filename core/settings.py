"""The device settings document: defaults, read access by dotted path."""

import json

# Defaults of the spec's settings table (device-api.md). Validation and persistence grow here.
DEFAULTS = {
    "device_name": "Meter Plus",
    "ledEnable": True,
    "wifi": {
        "primary": {"ssid": "", "password": "", "enable": True, "static_ip": False,
                    "ip": "", "subnet": "", "gateway": "", "dns": ""},
        "secondary": {"ssid": "", "password": "", "enable": False, "static_ip": False,
                      "ip": "", "subnet": "", "gateway": "", "dns": ""},
    },
    "accessPoint": {"enable": False, "ssid": "", "password_enable": False, "password": ""},
    "api_auth_required": False,
    "timezone": "Europe/Berlin",
    "ntp_server": "pool.ntp.org",
    "language": {"active": "de"},
    "mqtt": {"enable": False, "host": "", "port": 1883, "use_tls": False, "user": "", "password": "",
             "client_id": "", "topic_prefix": "", "sendInterval": 10, "discovery_prefix": "homeassistant"},
    "modbus": {"enable": False, "port": 502, "model": 203},
    "cloudIotEnabled": False,
    "medianFilterSize": 5,
    "ctRatio": 1,
    "autoOta": True,
    "history": {"flushMinutes": 60},
}


def _copy(tree):
    return json.loads(json.dumps(tree))


class Settings:
    """Settings document held in RAM; path is the JSON file on the flash (may not exist yet)."""

    def __init__(self, path=None):
        self.path = path
        self.doc = _copy(DEFAULTS)

    def get(self, dotted, default=None):
        """Value at a dotted path such as "mqtt.host", or default."""
        node = self.doc
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node
