"""mdns for the device bench: the device answers mDNS in ESP-IDF (no Python heap); this records what it was told."""


class Server:
    """mdns.Server(radio): hostname, instance_name, advertise_service(), deinit()."""

    def __init__(self, network_interface):
        self.hostname = "cpy"
        self.instance_name = ""
        self.services = []

    def advertise_service(self, *, service_type, protocol, port, txt_records=None):
        self.services.append((service_type, protocol, port))

    def deinit(self):
        self.services = []
