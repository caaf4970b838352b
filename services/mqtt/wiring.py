"""The MQTT feature: the client with Home Assistant discovery, its CA store and its routes."""

from core.app import LazyRoutes
import wifi

from services.mqtt.service import MqttService

CA_PATH = "mqtt_ca.pem"     # its store (services/mqtt/ca_store.py) is made when first asked for: TLS, the CA routes


def wire(app):
    """Register the MQTT service (TLS only where the build has ssl: plain brokers work without it)."""
    try:
        import ssl
    except ImportError:  # a build without ssl: TLS brokers fail with a clear last_error, plain ones work
        ssl = None
    port = app.http_port

    def web_url():
        """The device's web address for Home Assistant's device page (the address can change with DHCP)."""
        ip = wifi.radio.ipv4_address
        if ip is None:
            return None
        return "http://%s/" % ip if port == 80 else "http://%s:%d/" % (ip, port)

    app.mqtt = app.supervisor.add(MqttService(app.pool, app.bus, app.settings, app.device_id, clock=app.clock,
                                              ssl_context=ssl.create_default_context if ssl is not None else None,
                                              ca_path=CA_PATH, web_url=web_url, log=app.log,
                                              energy_floor=app.energy_floor))
    if app.tariff is not None:
        app.mqtt.money = app.tariff.money_values
    app.routes.append(LazyRoutes("services.mqtt.routes", ("/api/v1/mqtt/",)))
