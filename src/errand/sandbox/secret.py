"""Declared secrets: values a sandbox uses without ever holding them.

``Secret("GH_TOKEN", token, hosts=["api.github.com"])`` gives the sandbox
``GH_TOKEN=<a random placeholder>``. The egress proxy, for HTTPS to a declared
host only, terminates TLS with a certificate signed by a CA made for that one
sandbox (trusted inside; its key never leaves the host), reads each request,
replaces the placeholder with the value in one header of its head (``Authorization``
unless the secret names another; Basic credentials decoded), and re-originates TLS
to the real host with verification. Nowhere else in the request, and nowhere else
at all, is the placeholder more than a placeholder: not in the request line, nor in
other headers a server may echo back (a 404 page quoting the path, a redirect's
``Location``, CORS and request-id headers).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from errand.errors import ConfigError
from errand.sandbox.network import HostPattern, Network, decide_name

__all__ = ["CA_BUNDLE_PATH", "CA_PATH", "PLACEHOLDER_PREFIX", "SYSTEM_BUNDLES", "Secret", "check_secrets",
           "made_for_secrets"]

PLACEHOLDER_PREFIX = "errand-placeholder-"  # then random hex, unique to the sandbox
CA_PATH = "/etc/errand/egress-ca.pem"  # the sandbox's CA alone
CA_BUNDLE_PATH = "/etc/errand/ca-bundle.pem"  # the image's trust store plus the sandbox's CA
# Where images keep their trust store; the sandbox's CA is appended to the first that exists.
SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")  # an HTTP field name (a token)
_DEFAULT_PORT = 443


@dataclass(frozen=True)
class Secret:
    """A value for ``hosts`` (names, ``*.example.org`` for subdomains, each with an optional
    ``:port``; 443 without one), reached from inside as environment variable ``name``."""

    name: str
    value: str = field(repr=False)  # never in a repr, a log or an error message
    hosts: tuple[str, ...] = ()
    header: str = "Authorization"  # the one request header it is swapped into
    _rules: tuple[HostPattern, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError(f"a secret's name must be an environment variable name, not {self.name!r}",
                              code="invalid_secret")
        if not isinstance(self.value, str) or not self.value or not self.value.isprintable() \
                or not self.value.isascii():
            # Printable ASCII: it goes into request heads, where CR/LF would inject headers.
            raise ConfigError(f"secret {self.name}'s value must be non-empty printable ASCII",
                              code="invalid_secret")
        if not isinstance(self.header, str) or not _HEADER.match(self.header):
            raise ConfigError(f"secret {self.name}'s header must be a header name, not {self.header!r}",
                              code="invalid_secret")
        hosts = (self.hosts,) if isinstance(self.hosts, str) else tuple(self.hosts)
        if not hosts:
            raise ConfigError(f"secret {self.name} names no hosts: declare where it may be sent",
                              code="invalid_secret")
        rules = tuple(HostPattern.parse(host) for host in hosts)
        object.__setattr__(self, "hosts", tuple(str(rule) for rule in rules))
        object.__setattr__(self, "_rules", rules)

    def covers(self, host: str, port: int) -> bool:
        """Whether a TLS request to ``host:port`` gets this secret."""
        return any(rule.covers(host, port, "https") for rule in self._rules)


def check_secrets(secrets: Iterable[Secret] | None, network: Network,
                  env: Sequence[tuple[str, str]] = ()) -> tuple[Secret, ...]:
    """``secrets`` checked against the sandbox's policy (each host must be reachable over TLS) and
    its environment (neither a secret's name nor its value may also be there)."""
    if secrets is None:
        return ()
    if isinstance(secrets, Secret):
        secrets = (secrets,)
    checked = tuple(secrets)
    names = [secret.name for secret in checked if isinstance(secret, Secret)]
    if len(names) != len(checked):
        raise ConfigError("secrets must be Secret(name, value, hosts=[...]) values", code="invalid_secret")
    if len(set(names)) != len(names):
        raise ConfigError(f"two secrets share a name: {sorted(names)}", code="invalid_secret")
    clash = set(names) & {name for name, _ in env}
    if clash:
        raise ConfigError(f"{', '.join(sorted(clash))} is both a secret and an environment variable",
                          code="invalid_secret")
    exposed = sorted({secret.name for secret in checked for _, value in env if secret.value in value})
    if exposed:  # the placeholder would guard nothing: the value is in the sandbox under another name
        raise ConfigError(f"the value of secret {', '.join(exposed)} is also in the sandbox's environment",
                          code="invalid_secret")
    for secret in checked:
        for rule in secret._rules:
            probe = rule.pattern.replace("*", "x", 1)  # a name the pattern covers
            port = rule.port or _DEFAULT_PORT
            if not decide_name(network, probe, port, "https").allowed:
                raise ConfigError(f"secret {secret.name} is declared for {rule.pattern}:{port}, which the network "
                                  "policy does not allow", code="invalid_secret")
    return checked


def made_for_secrets(value: str) -> bool:
    """Whether an environment value is one a sandbox got for its secrets alone (a placeholder, or
    a path of its CA's files): a snapshot keeps none, since the next sandbox has its own."""
    return value.startswith(PLACEHOLDER_PREFIX) or value in (CA_PATH, CA_BUNDLE_PATH)
