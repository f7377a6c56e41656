"""The network egress policy a sandbox is created with. Deny by default.

A sandbox always has its own network namespace. ``Network.none()`` leaves it
with loopback only. Allowlists name domains and CIDRs; they are validated here,
strictly, because an over-broad pattern is a policy that allows everything.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from errand.errors import ConfigError

__all__ = ["Network"]

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


@dataclass(frozen=True)
class Network:
    mode: Literal["none", "allow", "open"] = "none"
    domains: tuple[str, ...] = ()
    cidrs: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

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
        return cls("allow", tuple(_domain(d) for d in domains), tuple(_cidr(c) for c in cidrs))

    @classmethod
    def open(cls) -> Network:
        """Any public address; never loopback, private, link-local or metadata ranges."""
        return cls("open")


def _domain(pattern: str) -> str:
    if not isinstance(pattern, str):
        raise ConfigError(f"a domain must be a string, not {pattern!r}", code="invalid_domain")
    name = pattern.strip().lower().rstrip(".")
    wildcard = name.startswith("*.")
    labels = (name[2:] if wildcard else name).split(".")
    if not all(_LABEL.match(label) for label in labels):
        raise ConfigError(f"not a domain name or '*.domain' pattern: {pattern!r}", code="invalid_domain")
    # '*' or '*.com' would allow a whole top-level domain: refuse it.
    if wildcard and len(labels) < 2:
        raise ConfigError(f"{pattern!r} is too broad: a wildcard must name a registrable domain "
                          "such as '*.example.com'", code="overbroad_domain")
    return name


def _cidr(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(text, strict=True)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"not a CIDR network: {text!r} ({error})", code="invalid_cidr") from None
