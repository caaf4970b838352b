"""The custom MQTT CA certificate: validation of one PEM certificate and its crash-safe file on the drive."""

import binascii

from micropython import const
from core.durable_file import read_text, remove_all, stored, write_text

PATH = "mqtt_ca.pem"
MAX_BYTES = const(4096)   # documented upload limit; a CA certificate is 1-2.5 KB of PEM
_BEGIN = "-----BEGIN CERTIFICATE-----"
_END = "-----END CERTIFICATE-----"


class CertError(ValueError):
    """Not exactly one PEM certificate (the API answers 400)."""


PRIVATE_KEY = ("a private key was sent; it was not stored. Upload only the CA certificate "
               "(-----BEGIN CERTIFICATE-----), never a key")


class TooLarge(ValueError):
    """Over MAX_BYTES (the API answers 413)."""


def validate(text):
    """Normalised PEM text of exactly one certificate; raises TooLarge or CertError with the reason."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > MAX_BYTES:
            raise TooLarge("certificate larger than %d bytes" % MAX_BYTES)
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeError:
            raise CertError("certificate is not text")
    if not isinstance(text, str):
        raise CertError("certificate must be PEM text")
    if len(text) > MAX_BYTES:
        raise TooLarge("certificate larger than %d bytes" % MAX_BYTES)
    s = text.strip()
    if "PRIVATE KEY-----" in s:  # PKCS#8, PKCS#1 (RSA), SEC1 (EC), DSA, OpenSSH, encrypted: alone or in a bundle
        raise CertError(PRIVATE_KEY)
    if not s.startswith(_BEGIN) or not s.endswith(_END):
        raise CertError("not a PEM certificate (BEGIN/END CERTIFICATE lines missing)")
    if s.count(_BEGIN) != 1 or s.count(_END) != 1:
        raise CertError("exactly one certificate is accepted (the device trusts a single custom CA)")
    body = s[len(_BEGIN):-len(_END)]
    b64 = "".join(body.split())
    if not b64:
        raise CertError("empty certificate")
    for ch in b64:
        if not ("A" <= ch <= "Z" or "a" <= ch <= "z" or "0" <= ch <= "9" or ch in "+/="):
            raise CertError("certificate body is not base64")
    try:
        der = binascii.a2b_base64(b64)
    except ValueError:  # binascii.Error on CPython is a ValueError; MicroPython raises ValueError
        raise CertError("certificate body is not base64")
    # The DER reader only when a certificate is checked (an upload, a few times in a device's life): every module
    # CircuitPython imports costs the start a collection and stays in the heap (core.app.LazyRoutes says more).
    from services.mqtt.der import DerError, PrivateKeyError, check_certificate

    try:
        check_certificate(der)
    except PrivateKeyError:
        raise CertError(PRIVATE_KEY)
    except DerError as exc:
        raise CertError("certificate body is not a DER X.509 certificate: %s" % exc)
    # Re-wrap at 64 columns: the form mbedTLS and OpenSSL both parse, whatever the upload's line breaks.
    lines = [_BEGIN]
    for i in range(0, len(b64), 64):
        lines.append(b64[i:i + 64])
    lines.append(_END)
    return "\n".join(lines) + "\n"


class CaStore:
    """The stored certificate at path (relative to the drive root), written without a rename (core/durable_file.py):
    a power cut leaves the old or the new certificate, and never two names on one cluster chain."""

    def __init__(self, path=PATH):
        self.path = path
        self._pem = None
        self._loaded = False

    def pem(self):
        """The stored PEM text, or None (read once and kept: CircuitPython's ssl keeps only a reference)."""
        if not self._loaded:
            # a damaged or torn file must not break TLS with the built-in bundle: it reads as none
            self._pem = read_text(self.path, validate, MAX_BYTES + 1)
            self._loaded = True
        return self._pem

    def save(self, text):
        """Validate and store; returns the stored PEM text. Raises CertError/TooLarge and changes nothing then."""
        pem = validate(text)
        write_text(self.path, pem)
        self._pem = pem
        self._loaded = True
        return pem

    def delete(self):
        """Remove the stored certificate; False when there was none."""
        had = self.pem() is not None or stored(self.path)
        remove_all(self.path)
        self._pem = None
        self._loaded = True
        return had

    def status(self, bundle_size=0):
        """{has_custom_cert, bundle_size, custom_size}: bundle_size is what TLS verifies against in bytes
        (the custom certificate replaces the built-in bundle, whose size CircuitPython does not expose: 0)."""
        pem = self.pem()
        size = len(pem) if pem is not None else 0
        return {"has_custom_cert": pem is not None, "bundle_size": size if pem is not None else bundle_size,
                "custom_size": size}
