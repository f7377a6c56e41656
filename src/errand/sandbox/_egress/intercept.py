"""What the egress proxy needs to swap a sandbox's declared secrets in: its own CA, the
placeholders the sandbox holds, and the swap itself.

The CA is made per sandbox with ``cryptography`` (EC P-256) and lives in this
process's memory only: its certificate goes into the sandbox, its key nowhere.
A leaf for a declared host is signed on first use and loaded from a memfd, so
no key ever touches a disk. Upstream TLS is verified against the system's
trust store, or ``ERRAND_EGRESS_CA_FILE`` alone when set (tests' own CA).
"""

from __future__ import annotations

import base64
import datetime
import os
import re
import secrets
import ssl
from collections.abc import Callable
from typing import Any

from errand.sandbox.secret import CA_BUNDLE_PATH, CA_PATH, PLACEHOLDER_PREFIX, SYSTEM_BUNDLES, Secret

__all__ = ["CA_BUNDLE_PATH", "CA_PATH", "SYSTEM_BUNDLES", "Interceptor", "upstream_context"]


_LIFETIME = datetime.timedelta(days=30)
_BASIC = re.compile(rb"(?i)(basic[ \t]+)([A-Za-z0-9+/=]+)([ \t]*)")  # a header's Basic credentials


class Interceptor:
    """One sandbox's declared secrets, their placeholders, and the CA its swaps are made under."""

    def __init__(self, declared: tuple[Secret, ...], *, _state: dict[str, Any] | None = None) -> None:
        # cryptography only where a sandbox declares secrets: every errand process imports this module.
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.secrets = declared
        if _state is not None:  # the same interceptor, in a supervisor process: see to_state
            self.placeholders = dict(_state["placeholders"])
            key = serialization.load_pem_private_key(_state["key"].encode(), None)
            assert isinstance(key, ec.EllipticCurvePrivateKey)
            self._key = key
            self._certificate = x509.load_pem_x509_certificate(_state["ca"].encode())
            self._name = self._certificate.subject
            self.ca_pem = self._certificate.public_bytes(serialization.Encoding.PEM)
            self._leaves: dict[str, bytes] = {}
            return
        # Random, so a sandbox learns nothing from one, and unique to this sandbox.
        self.placeholders = {secret.name: f"{PLACEHOLDER_PREFIX}{secrets.token_hex(20)}" for secret in declared}
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                                   f"errand sandbox egress CA {secrets.token_hex(4)}")])
        self._certificate = (
            x509.CertificateBuilder().subject_name(self._name).issuer_name(self._name)
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + _LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256()))
        self.ca_pem = self._certificate.public_bytes(serialization.Encoding.PEM)
        self._leaves = {}  # host -> its certificate and key, PEM

    def to_state(self) -> dict[str, Any]:
        """All of it, values and the CA's key included, for :meth:`from_state` in the supervisor
        that serves a detached sandbox's proxy (handed over a pipe: never argv, never a file)."""
        from cryptography.hazmat.primitives import serialization

        return {"secrets": [[s.name, s.value, list(s.hosts), s.header] for s in self.secrets],
                "placeholders": self.placeholders, "ca": self.ca_pem.decode(),
                "key": self._key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()).decode()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Interceptor:
        declared = tuple(Secret(name, value, hosts=tuple(hosts), header=header)
                         for name, value, hosts, header in state["secrets"])
        return cls(declared, _state=state)

    def env(self) -> dict[str, str]:
        """The sandbox's environment: each secret's placeholder, and where its trust store is."""
        return {**self.placeholders, "SSL_CERT_FILE": CA_BUNDLE_PATH, "REQUESTS_CA_BUNDLE": CA_BUNDLE_PATH,
                "CURL_CA_BUNDLE": CA_BUNDLE_PATH, "GIT_SSL_CAINFO": CA_BUNDLE_PATH, "NODE_EXTRA_CA_CERTS": CA_PATH}

    def covers(self, host: str, port: int) -> bool:
        """Whether TLS to ``host:port`` is opened here, so a secret can be swapped in."""
        return any(secret.covers(host, port) for secret in self.secrets)

    def server_context(self, host: str, on_name: Callable[[str | None], bool]) -> ssl.SSLContext:
        """A server context presenting a leaf for ``host``; ``on_name`` sees the client's SNI and
        says whether to go on (a refused name ends the handshake)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])  # requests are read one by one: no HTTP/2
        chain = self._leaves.get(host)
        if chain is None:
            chain = self._leaves[host] = self._leaf(host)
        fd = os.memfd_create("errand-leaf", os.MFD_CLOEXEC)
        try:
            os.write(fd, chain)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)

        def check(_socket: object, name: str | None, _context: ssl.SSLContext) -> int | None:
            return None if on_name(name) else ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME

        context.sni_callback = check
        return context

    def swap(self, head: bytes, host: str, port: int) -> bytes:
        """``head`` with the placeholder of each secret declared for ``host:port`` replaced by its
        value in that secret's header alone (inside Basic credentials too: base64 of
        ``user:password``). The request line and every other header keep the placeholder, so
        a server that echoes them (a 404 quoting the path, a redirect, CORS, a request id)
        hands the sandbox nothing."""
        for secret in self.secrets:
            if not secret.covers(host, port):
                continue
            placeholder, value = self.placeholders[secret.name].encode(), secret.value.encode()

            def swapped(match: re.Match[bytes], placeholder: bytes = placeholder, value: bytes = value) -> bytes:
                field = match.group(2)
                basic = _BASIC.fullmatch(field)
                if basic is not None:
                    try:
                        credentials = base64.b64decode(basic.group(2), validate=True)
                    except ValueError:
                        credentials = b""
                    if placeholder in credentials:
                        return match.group(1) + basic.group(1) + base64.b64encode(
                            credentials.replace(placeholder, value)) + basic.group(3)
                return match.group(1) + field.replace(placeholder, value)

            line = re.compile(rb"(?im)^(" + re.escape(secret.header.encode()) + rb":[ \t]*)([^\r\n]*)")
            head = line.sub(swapped, head)
        return head

    def redact(self, text: str) -> str:
        """``text`` with each secret's value named instead (``<GH_TOKEN>``): what the proxy logs
        and answers may quote what a declared host sent, and a host that echoes the value back
        must not put it into the egress log, the task's events or a reply to the sandbox."""
        for secret in self.secrets:
            text = text.replace(secret.value, f"<{secret.name}>")
        return text

    def _leaf(self, host: str) -> bytes:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])).issuer_name(self._name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + _LIFETIME)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                           critical=False)
            .sign(self._key, hashes.SHA256()))
        return certificate.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


_upstream: dict[str | None, ssl.SSLContext] = {}


def upstream_context() -> ssl.SSLContext:
    """How the proxy verifies a declared host when it re-originates TLS (one context per trust store)."""
    cafile = os.environ.get("ERRAND_EGRESS_CA_FILE") or None
    context = _upstream.get(cafile)
    if context is None:
        context = _upstream[cafile] = ssl.create_default_context(cafile=cafile)
        context.set_alpn_protocols(["http/1.1"])
    return context
