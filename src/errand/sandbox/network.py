"""The network egress policy a sandbox is created with. Deny by default.

A sandbox always has its own network namespace. ``Network.none()`` leaves it
with loopback only. Allowlists name domains and CIDRs, each optionally with a
port; they are validated here, strictly, because an over-broad pattern is a
policy that allows everything.

Ports are part of the policy. An entry without one (``example.org``,
``203.0.113.0/24``) allows TLS through a CONNECT tunnel to port 443 and plain
HTTP to port 80, what a browser would use; an entry with one
(``example.org:8443``, ``203.0.113.0/24:8443``, ``[2001:db8::/32]:8443``)
allows that port alone, for either. Name a destination twice to allow both.
``Network.open()`` allows any port of any public address.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from errand.errors import ConfigError

__all__ = ["Decision", "HostPattern", "Network", "Scheme", "decide_address", "decide_name", "entry_for_url",
           "parse_address"]

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_PORT = re.compile(r"^[1-9][0-9]{0,4}$")

Scheme = Literal["http", "https"]  # plain HTTP, or TLS through a CONNECT tunnel
_DEFAULT_PORTS: dict[str, int] = {"https": 443, "http": 80}
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class _NameRule:
    pattern: str  # "example.org" or "*.example.org"
    port: int | None  # None: the scheme's default port


@dataclass(frozen=True)
class _NetworkRule:
    network: IPNetwork
    port: int | None


@dataclass(frozen=True)
class Network:
    mode: Literal["none", "allow", "open"] = "none"
    domains: tuple[str, ...] = ()  # normalised: "example.org", "*.example.net", "example.org:8443"
    cidrs: tuple[str, ...] = ()  # normalised: "203.0.113.0/24", "203.0.113.0/24:8443", "[2001:db8::/32]:8443"
    _names: tuple[_NameRule, ...] = field(init=False, repr=False, compare=False)
    _networks: tuple[_NetworkRule, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Validate however the value was made (the classmethods, or Network(...) directly).
        if self.mode not in ("none", "allow", "open"):
            raise ConfigError(f"network mode must be 'none', 'allow' or 'open', not {self.mode!r}",
                              code="invalid_network")
        if isinstance(self.domains, str) or isinstance(self.cidrs, str):
            raise ConfigError("domains and cidrs must be sequences, not a single string", code="invalid_network")
        names = tuple(_domain(d) for d in self.domains)
        networks = tuple(_cidr(c) for c in self.cidrs)
        object.__setattr__(self, "_names", names)
        object.__setattr__(self, "_networks", networks)
        object.__setattr__(self, "domains", tuple(_with_port(rule.pattern, rule.port) for rule in names))
        object.__setattr__(self, "cidrs", tuple(_network_text(rule) for rule in networks))
        if self.mode != "allow" and (self.domains or self.cidrs):
            raise ConfigError(f"Network.{self.mode}() takes no domains or CIDRs", code="invalid_network")

    @classmethod
    def none(cls) -> Network:
        """Loopback only: nothing leaves the sandbox."""
        return cls("none")

    @classmethod
    def allow(cls, *domains: str, cidrs: Iterable[str | IPNetwork] = ()) -> Network:
        """Only these names (``*.example.net`` means its subdomains) and networks.

        Each may end in ``:port`` (``example.org:8443``; an IPv6 network in
        brackets, ``[2001:db8::/32]:8443``); without one it means 443 for TLS
        and 80 for plain HTTP.
        """
        if not domains and not cidrs:
            raise ConfigError("Network.allow() needs at least one domain or CIDR; "
                              "use Network.none() to allow nothing", code="empty_allowlist")
        return cls("allow", tuple(domains), tuple(cidrs))  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Network:
        """A policy from data (errand.toml's ``[network]``, an API request).

        ``{"mode": "allow", "domains": [...], "cidrs": [...]}``; ``mode`` defaults
        to "allow" when domains or CIDRs are given, else "none". Unknown keys are
        refused: a misspelt key must not silently widen or narrow a policy.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"a network policy must be a table, not {type(data).__name__}",
                              code="invalid_network")
        unknown = set(data) - {"mode", "domains", "cidrs"}
        if unknown:
            raise ConfigError(f"unknown network policy keys: {', '.join(sorted(unknown))} "
                              "(known: mode, domains, cidrs)", code="unknown_key")
        domains, cidrs = data.get("domains", ()), data.get("cidrs", ())
        mode = data.get("mode", "allow" if domains or cidrs else "none")
        if mode == "allow":
            return cls.allow(*domains, cidrs=cidrs)
        return cls(mode, tuple(domains), tuple(cidrs))

    @classmethod
    def open(cls) -> Network:
        """Any public address on any port; never loopback, private, link-local or metadata ranges."""
        return cls("open")

    def to_dict(self) -> dict[str, Any]:
        """What :meth:`from_dict` reads back into an equal policy."""
        return {"mode": self.mode, "domains": list(self.domains), "cidrs": list(self.cidrs)}


@dataclass(frozen=True)
class HostPattern:
    """One domain entry as a policy reads it (``example.org``, ``*.example.org`` for its
    subdomains, either with ``:port``), for what names hosts outside a policy (a secret's)."""

    pattern: str
    port: int | None  # None: the scheme's default port

    @classmethod
    def parse(cls, entry: object) -> HostPattern:
        """``entry`` checked as strictly as a policy's domains are (ConfigError if not one)."""
        rule = _domain(entry)
        return cls(rule.pattern, rule.port)

    def covers(self, host: str, port: int, scheme: Scheme) -> bool:
        return _matches(self.pattern, host.lower().rstrip(".")) and _port_allowed(self.port, port, scheme)

    def __str__(self) -> str:
        return _with_port(self.pattern, self.port)


def entry_for_url(url: str) -> str | None:
    """The domain entry that lets a sandbox fetch ``url``: its host, and its port unless the
    scheme's default (a registry at ``https://mirror:8443/`` needs ``mirror:8443``)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    if port is None or port == _DEFAULT_PORTS.get(parts.scheme.lower()):
        return parts.hostname
    return f"{parts.hostname}:{port}"


def _domain(entry: object) -> _NameRule:
    if not isinstance(entry, str):
        raise ConfigError(f"a domain must be a string, not {entry!r}", code="invalid_domain")
    text = entry.strip().lower()
    name, port = text, None
    if not text.startswith("[") and text.count(":") == 1:
        name, port_text = text.split(":")
        port = _port(port_text, entry)
    name = name.rstrip(".")
    if name in ("*", "*.*"):
        raise ConfigError(f"{entry!r} would allow every domain; use Network.open() for that",
                          code="overbroad_domain")
    if parse_address(name) is not None or name.isdigit() or name.replace(".", "").isdigit():
        raise ConfigError(f"{entry!r} is an address, not a domain: allow it with cidrs=[...]",
                          code="invalid_domain")
    wildcard = name.startswith("*.")
    labels = (name[2:] if wildcard else name).split(".")
    if not all(_LABEL.match(label) for label in labels):
        raise ConfigError(f"not a domain name or '*.domain' pattern (with an optional ':port'): {entry!r}",
                          code="invalid_domain")
    # '*' or '*.com' would allow a whole top-level domain: refuse it.
    if wildcard and len(labels) < 2:
        raise ConfigError(f"{entry!r} is too broad: a wildcard must name a registrable domain "
                          "such as '*.example.com'", code="overbroad_domain")
    return _NameRule(name, port)


def _cidr(entry: object) -> _NetworkRule:
    if isinstance(entry, ipaddress.IPv4Network | ipaddress.IPv6Network):
        network, port = entry, None
    elif isinstance(entry, str):
        text, port = entry.strip(), None
        if text.startswith("["):  # an IPv6 network with a port: "[2001:db8::/32]:8443"
            text, _, rest = text[1:].partition("]")
            if rest:
                if not rest.startswith(":"):
                    raise ConfigError(f"not a CIDR network: {entry!r} (expected '[network]:port')",
                                      code="invalid_cidr")
                port = _port(rest[1:], entry, "[2001:db8::/32]:8443")
        elif text.count(":") == 1:  # an IPv4 network with a port: "203.0.113.0/24:8443"
            text, port_text = text.split(":")
            port = _port(port_text, entry, "203.0.113.0/24:8443")
        try:
            network = ipaddress.ip_network(text, strict=True)
        except ValueError as error:
            raise ConfigError(f"not a CIDR network: {entry!r} ({error})", code="invalid_cidr") from None
    else:
        raise ConfigError(f"not a CIDR network: {entry!r} (a string such as '203.0.113.0/24')",
                          code="invalid_cidr")
    # 0.0.0.0/0 would re-open loopback, private and metadata ranges; Network.open() is
    # the public internet without them.
    if network.prefixlen < 8:
        raise ConfigError(f"{entry!r} is too broad (a /{network.prefixlen}); name narrower networks, or use "
                          "Network.open() for any public address", code="overbroad_cidr")
    return _NetworkRule(network, port)


def _port(text: str, entry: object, example: str = "example.org:8443") -> int:
    # Digits only: int() would also take ' 443', '+443', '4_43' and '٤٤٣'.
    if not _PORT.match(text) or int(text) > 65535:
        raise ConfigError(f"{entry!r}: {text!r} is not a port; give a number from 1 to 65535, "
                          f"as in {example!r}", code="invalid_port")
    return int(text)


def _with_port(text: str, port: int | None) -> str:
    return text if port is None else f"{text}:{port}"


def _network_text(rule: _NetworkRule) -> str:
    if rule.port is None:
        return str(rule.network)
    return f"[{rule.network}]:{rule.port}" if rule.network.version == 6 else f"{rule.network}:{rule.port}"


# --------------------------------------------------------------- decisions

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Never reachable unless an explicit CIDR names them: the host itself, private
# networks behind it, cloud metadata services, and addresses that are not
# unicast. The documentation ranges (TEST-NET) are *not* here: they are not
# private, and some registries resolve into them.
_REFUSED = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
    "::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "64:ff9b:1::/48",
))
_REFUSED_REASON = "loopback, private, link-local, CGNAT, metadata or non-unicast address"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str


def decide_name(policy: Network, host: str, port: int, scheme: Scheme) -> Decision:
    """May the sandbox ask for this host name (or IP literal) on this port? Decided before any DNS query.

    ``scheme`` is how the proxy would carry it: "https" for a CONNECT tunnel
    (which must carry TLS), "http" for a plain-HTTP request.
    """
    literal = parse_address(host)
    if policy.mode == "none":
        return Decision(False, "network is none")
    if literal is not None:
        if policy.mode == "open" and not _refused(literal):
            return Decision(True, "open network")
        covering = [rule.port for rule in policy._networks if _unmapped(literal) in rule.network]
        if not covering:
            return Decision(False, "IP literal not covered by an allowed CIDR")
        return _port_decision(covering, host, port, scheme, "address in an allowed CIDR")
    name = host.lower().rstrip(".")
    if policy.mode == "open":
        return Decision(True, "open network")
    matching = [rule for rule in policy._names if _matches(rule.pattern, name)]
    if not matching:
        return Decision(False, "domain not in the allowlist")
    allowed = [rule for rule in matching if _port_allowed(rule.port, port, scheme)]
    if allowed:
        return Decision(True, f"matches {_with_port(allowed[0].pattern, allowed[0].port)}")
    return _port_decision([rule.port for rule in matching], name, port, scheme, "")


def decide_address(policy: Network, address: Address, port: int, scheme: Scheme) -> Decision:
    """May the proxy connect to this resolved address and port on the sandbox's behalf?"""
    if cidr_allows(policy, address, port, scheme):
        return Decision(True, "address in an allowed CIDR")
    if _refused(address):
        if any(_unmapped(address) in rule.network for rule in policy._networks):
            return Decision(False, f"resolves to {address}, in an allowed CIDR but not for "
                                   f"{_SCHEME_NAMES[scheme]} to port {port}")
        return Decision(False, f"resolves to a {_REFUSED_REASON} ({address})")
    return Decision(True, "public address")


def cidr_allows(policy: Network, address: Address, port: int, scheme: Scheme) -> bool:
    """Whether a CIDR of the policy names this address for this port (so even an inward one is allowed)."""
    address = _unmapped(address)
    return any(address in rule.network and _port_allowed(rule.port, port, scheme) for rule in policy._networks)


_SCHEME_NAMES = {"https": "TLS", "http": "plain HTTP"}


def _matches(pattern: str, name: str) -> bool:
    if pattern.startswith("*."):
        return name.endswith(pattern[1:]) and name != pattern[2:]
    return name == pattern


def _port_allowed(rule_port: int | None, port: int, scheme: Scheme) -> bool:
    return port == (_DEFAULT_PORTS[scheme] if rule_port is None else rule_port)


def _port_decision(ports: list[int | None], host: str, port: int, scheme: Scheme, reason: str) -> Decision:
    if any(_port_allowed(rule_port, port, scheme) for rule_port in ports):
        return Decision(True, reason)
    allowed = []
    if None in ports:
        allowed.append("TLS to 443, plain HTTP to 80")
    allowed.extend(str(rule_port) for rule_port in sorted({p for p in ports if p is not None}))
    return Decision(False, f"{_SCHEME_NAMES[scheme]} to port {port} is not allowed for {host} "
                           f"(allowed: {', '.join(allowed)})")


def parse_address(host: str) -> Address | None:
    """The address an IP literal names (brackets allowed; mapped/NAT64 forms unwrapped), or None."""
    try:
        return _unmapped(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _unmapped(address: Address) -> Address:
    """The IPv4 address inside an IPv4-mapped or NAT64 IPv6 address; else the address."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def _refused(address: Address) -> bool:
    address = _unmapped(address)
    return any(address.version == net.version and address in net for net in _REFUSED)
