"""Cost of input checks in the MicroPython VM: the CA certificate's DER walk, a whole CA upload check, settings."""

import base64
import subprocess
import tempfile

from tools.mpvm import MicroVM


def _cert(folder, name, *key):
    subprocess.run(["openssl", "req", "-x509", "-newkey", *key, "-nodes", "-keyout", name + ".key", "-out",
                    name + ".crt", "-days", "2", "-subj", "/C=DE/O=Meter Plus/CN=Bench CA " + name,
                    "-addext", "basicConstraints=critical,CA:TRUE"], cwd=folder, check=True, capture_output=True)
    return open("%s/%s.crt" % (folder, name)).read()


def main():
    with tempfile.TemporaryDirectory() as d:
        pems = {"rsa2048": _cert(d, "rsa", "rsa:2048"),
                "rsa4096": _cert(d, "rsa4", "rsa:4096"),
                "ec_p256": _cert(d, "ec", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")}
    rows = []
    with MicroVM(packages=("core", "services")) as vm:
        for name, pem in sorted(pems.items()):
            der = base64.b64decode("".join(pem.strip().splitlines()[1:-1]))
            setup = "from services.mqtt.der import check_certificate\nfrom services.mqtt import ca_store\n" \
                    "der = %r\npem = %r\n" % (der, pem)
            walk = vm.measure(setup, "check_certificate(der)", repeat=20)
            whole = vm.measure(setup, "ca_store.validate(pem)", repeat=10)
            rows.append(("DER walk, %s (%d B DER)" % (name, len(der)),) + walk)
            rows.append(("ca_store.validate, %s (%d B PEM)" % (name, len(pem)),) + whole)
        setup = "from core.settings import Settings\ns = Settings(None, zone_ok=lambda z: True)\n"
        name_ascii = vm.measure(setup, "s.prepare({'device_name': 'Z' * 31})", repeat=20)
        name_pair = vm.measure(setup, "s.prepare({'device_name': 'Z' * 29 + '\\ud83d\\ude00'})", repeat=20)
        static = vm.measure(setup, "s.prepare({'wifi': {'primary': {'static_ip': True, 'ip': '192.168.1.10', "
                                   "'subnet': '255.255.255.0', 'gateway': '192.168.1.1', 'dns': '8.8.8.8'}}})",
                            repeat=20)
    rows += [("settings prepare, device_name 31 ASCII", ) + name_ascii,
             ("settings prepare, device_name with a surrogate pair", ) + name_pair,
             ("settings prepare, static addressing (5 keys + cross checks)", ) + static]
    for label, fuel, heap in rows:
        print("%-58s fuel=%9d heap=%7d bytes" % (label, fuel, heap))
    walk_rsa = [r for r in rows if r[0].startswith("DER walk, rsa2048")][0]
    return "input: der_walk_rsa2048_fuel=%d heap=%d static_prepare_fuel=%d" % (walk_rsa[1], walk_rsa[2], static[0])


if __name__ == "__main__":
    main()
