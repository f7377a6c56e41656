"""The network egress policy a sandbox is created with. Deny by default.

A sandbox always has its own network namespace. ``Network.none()`` leaves it
with loopback only. Allowlists name domains and CIDRs; they are validated here,
strictly, because an over-broad pattern is a policy that allows everything.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from errand.errors import ConfigError

__all__ = ["Decision", "Network", "decide_address", "decide_name", "parse_address"]

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


@dataclass(frozen=True)
class Network:
    mode: Literal["none", "allow", "open"] = "none"
    domains: tuple[str, ...] = ()
    cidrs: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    def __post_init__(self) -> None:
        # Validate however the value was made (the classmethods, or Network(...) directly).
        if self.mode not in ("none", "allow", "open"):
            raise ConfigError(f"network mode must be 'none', 'allow' or 'open', not {self.mode!r}",
                              code="invalid_network")
        if isinstance(self.domains, str) or isinstance(self.cidrs, str):
            raise ConfigError("domains and cidrs must be sequences, not a single string", code="invalid_network")
        object.__setattr__(self, "domains", tuple(_domain(d) for d in self.domains))
        object.__setattr__(self, "cidrs", tuple(_cidr(c) for c in self.cidrs))
        if self.mode != "allow" and (self.domains or self.cidrs):
            raise ConfigError(f"Network.{self.mode}() takes no domains or CIDRs", code="invalid_network")

    @classmethod
    def none(cls) -> Network:
        """Loopback only: nothing leaves the sandbox."""
        return cls("none")

    @classmethod
    def allow(cls, *domains: str, cidrs: Iterable[str] = ()) -> Network:
        """Only these names (``*.example.net`` means its subdomains) and networks."""
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
        """Any public address; never loopback, private, link-local or metadata ranges."""
        return cls("open")


def _domain(pattern: str) -> str:
    if not isinstance(pattern, str):
        raise ConfigError(f"a domain must be a string, not {pattern!r}", code="invalid_domain")
    name = pattern.strip().lower().rstrip(".")
    if name in ("*", "*.*"):
        raise ConfigError(f"{pattern!r} would allow every domain; use Network.open() for that",
                          code="overbroad_domain")
    if parse_address(name) is not None or name.isdigit() or name.replace(".", "").isdigit():
        raise ConfigError(f"{pattern!r} is an address, not a domain: allow it with cidrs=[...]",
                          code="invalid_domain")
    wildcard = name.startswith("*.")
    labels = (name[2:] if wildcard else name).split(".")
    if not all(_LABEL.match(label) for label in labels):
        raise ConfigError(f"not a domain name or '*.domain' pattern: {pattern!r}", code="invalid_domain")
    # '*' or '*.com' would allow a whole top-level domain: refuse it.
    if wildcard and len(labels) < 2:
        raise ConfigError(f"{pattern!r} is too broad: a wildcard must name a registrable domain "
                          "such as '*.example.com'", code="overbroad_domain")
    return name


def _cidr(text: object) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if isinstance(text, ipaddress.IPv4Network | ipaddress.IPv6Network):
        network = text
    else:
        try:
            network = ipaddress.ip_network(text, strict=True)  # type: ignore[arg-type]
        except (TypeError, ValueError) as error:
            raise ConfigError(f"not a CIDR network: {text!r} ({error})", code="invalid_cidr") from None
    # 0.0.0.0/0 would re-open loopback, private and metadata ranges; Network.open() is
    # the public internet without them.
    if network.prefixlen < 8:
        raise ConfigError(f"{text!r} is too broad (a /{network.prefixlen}); name narrower networks, or use "
                          "Network.open() for any public address", code="overbroad_cidr")
    return network


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


def decide_name(policy: Network, host: str) -> Decision:
    """May the sandbox ask for this host name (or IP literal)? Decided before any DNS query."""
    literal = parse_address(host)
    if policy.mode == "none":
        return Decision(False, "network is none")
    if literal is not None:
        if any(literal in net for net in policy.cidrs):
            return Decision(True, "address in an allowed CIDR")
        if policy.mode == "open" and not _refused(literal):
            return Decision(True, "open network")
        return Decision(False, "IP literal not covered by an allowed CIDR")
    name = host.lower().rstrip(".")
    if policy.mode == "open":
        return Decision(True, "open network")
    for pattern in policy.domains:
        if pattern.startswith("*."):
            if name.endswith(pattern[1:]) and name != pattern[2:]:
                return Decision(True, f"matches {pattern}")
        elif name == pattern:
            return Decision(True, f"matches {pattern}")
    return Decision(False, "domain not in the allowlist")


def decide_address(policy: Network, address: Address) -> Decision:
    """May the proxy connect to this resolved address on the sandbox's behalf?"""
    if any(_unmapped(address) in net for net in policy.cidrs):
        return Decision(True, "address in an allowed CIDR")
    if _refused(address):
        return Decision(False, f"resolves to a {_REFUSED_REASON} ({address})")
    return Decision(True, "public address")


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
