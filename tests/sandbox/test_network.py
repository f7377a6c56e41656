"""Egress policies: strict construction, and the decisions the proxy asks them for."""

from __future__ import annotations

import ipaddress

import pytest

from errand import ConfigError, Network
from errand.sandbox.network import decide_address, decide_name


@pytest.mark.parametrize(("make", "code"), [
    (lambda: Network.allow("*"), "overbroad_domain"),
    (lambda: Network.allow("*.com"), "overbroad_domain"),
    (lambda: Network.allow("exa mple.org"), "invalid_domain"),
    (lambda: Network.allow("127.0.0.1"), "invalid_domain"),
    (lambda: Network.allow(cidrs=["10.0.0.0/33"]), "invalid_cidr"),
    (lambda: Network.allow(cidrs=["10.0.0.1/8"]), "invalid_cidr"),
    (lambda: Network.allow(cidrs=["0.0.0.0/0"]), "overbroad_cidr"),
    (lambda: Network.allow(), "empty_allowlist"),
    (lambda: Network.from_dict({"domians": ["example.org"]}), "unknown_key"),
    (lambda: Network.from_dict({"mode": "everything"}), "invalid_network"),
    (lambda: Network.from_dict({"mode": "open", "domains": ["example.org"]}), "invalid_network"),
    (lambda: Network("allow", ("*.com",)), "overbroad_domain"),
])
def test_bad_policies_fail_at_construction(make, code: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as caught:
        make()
    assert caught.value.code == code
    assert caught.value.message


def test_from_dict_builds_the_same_policy_as_allow() -> None:
    assert Network.from_dict({"domains": ["Example.org."], "cidrs": ["198.51.100.0/24"]}) == Network.allow(
        "example.org", cidrs=["198.51.100.0/24"])
    assert Network.from_dict({}) == Network.none()
    assert Network.from_dict({"mode": "open"}) == Network.open()


def test_wildcards_are_strict() -> None:
    policy = Network.allow("*.example.net", "example.org")
    assert decide_name(policy, "a.example.net").allowed
    assert decide_name(policy, "b.a.example.net").allowed
    assert not decide_name(policy, "example.net").allowed  # subdomains only
    assert not decide_name(policy, "evilexample.net").allowed
    assert decide_name(policy, "EXAMPLE.ORG.").allowed
    assert not decide_name(policy, "a.example.org").allowed


@pytest.mark.parametrize("address", ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
                                     "100.64.0.1", "0.0.0.0", "::1", "fe80::1", "fd00:ec2::254", "::ffff:127.0.0.1",
                                     "64:ff9b::a00:1", "224.0.0.1"])
def test_inward_addresses_are_refused_unless_a_cidr_names_them(address: str) -> None:
    parsed = ipaddress.ip_address(address)
    assert not decide_address(Network.open(), parsed).allowed
    assert not decide_address(Network.allow("example.org"), parsed).allowed
    if parsed.version == 4:
        assert decide_address(Network.allow(cidrs=[f"{address}/32"]), parsed).allowed


@pytest.mark.parametrize("address", ["203.0.113.7", "198.51.100.1", "192.0.2.1", "2001:db8::1"])
def test_public_and_documentation_addresses_are_not_refused(address: str) -> None:
    assert decide_address(Network.open(), ipaddress.ip_address(address)).allowed


def test_ip_literals_need_a_cidr() -> None:
    assert not decide_name(Network.allow("example.org"), "203.0.113.7").allowed
    assert decide_name(Network.allow(cidrs=["203.0.113.0/24"]), "203.0.113.7").allowed
    assert not decide_name(Network.none(), "example.org").allowed
    assert decide_name(Network.open(), "203.0.113.7").allowed
    assert not decide_name(Network.open(), "127.0.0.1").allowed
