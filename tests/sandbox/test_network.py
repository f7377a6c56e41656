"""Egress policies: strict construction, and the decisions the proxy asks them for."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from errand import ConfigError, Network
from errand.sandbox.network import decide_address, decide_name, entry_for_url
from errand.tasks.round.environment import Environment


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
    (lambda: Network.allow("example.org:0"), "invalid_port"),
    (lambda: Network.allow("example.org:65536"), "invalid_port"),
    (lambda: Network.allow("example.org:0443"), "invalid_port"),
    (lambda: Network.allow("example.org: 443"), "invalid_port"),
    (lambda: Network.allow("example.org:"), "invalid_port"),
    (lambda: Network.allow("*.example.org:http"), "invalid_port"),
    (lambda: Network.allow("example.org:443:1"), "invalid_domain"),
    (lambda: Network.allow("[2001:db8::1]:443"), "invalid_domain"),
    (lambda: Network.allow(cidrs=["203.0.113.0/24:0"]), "invalid_port"),
    (lambda: Network.allow(cidrs=["[2001:db8::/32]:99999"]), "invalid_port"),
    (lambda: Network.allow(cidrs=["[2001:db8::/32]443"]), "invalid_cidr"),
    (lambda: Network.allow(cidrs=["2001:db8::/32:443"]), "invalid_cidr"),
    (lambda: Network.from_dict({"domains": ["example.org:99999"]}), "invalid_port"),
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


def test_entries_with_ports_are_normalised_and_round_trip() -> None:
    policy = Network.allow("Example.org.:8443", "*.Example.net:8000", "example.org",
                           cidrs=["203.0.113.0/24:8443", "[2001:DB8::/32]:443", ipaddress.ip_network("10.0.0.0/8")])
    assert policy.domains == ("example.org:8443", "*.example.net:8000", "example.org")
    assert policy.cidrs == ("203.0.113.0/24:8443", "[2001:db8::/32]:443", "10.0.0.0/8")
    assert Network.from_dict(policy.to_dict()) == policy


def test_a_plain_entry_means_tls_to_443_and_plain_http_to_80() -> None:
    policy = Network.allow("example.org", cidrs=["203.0.113.0/24"])
    for host in ("example.org", "203.0.113.7"):
        assert decide_name(policy, host, 443, "https").allowed
        assert decide_name(policy, host, 80, "http").allowed
        assert not decide_name(policy, host, 80, "https").allowed  # a tunnel carries TLS, to 443
        assert not decide_name(policy, host, 443, "http").allowed
        assert not decide_name(policy, host, 8443, "https").allowed
    assert decide_name(policy, "example.org", 22, "https").reason == (
        "TLS to port 22 is not allowed for example.org (allowed: TLS to 443, plain HTTP to 80)")
    assert decide_name(policy, "other.org", 22, "https").reason == "domain not in the allowlist"


def test_an_explicit_port_is_that_port_alone_for_either_scheme() -> None:
    policy = Network.allow("example.org:8443", "*.example.net:8000", cidrs=["203.0.113.0/24:8443"])
    for host, port in (("example.org", 8443), ("a.example.net", 8000), ("203.0.113.7", 8443)):
        assert decide_name(policy, host, port, "https").allowed
        assert decide_name(policy, host, port, "http").allowed
        assert not decide_name(policy, host, 443, "https").allowed
        assert not decide_name(policy, host, 80, "http").allowed
    both = Network.allow("example.org", "example.org:8443")
    assert all(decide_name(both, "example.org", port, "https").allowed for port in (443, 8443))
    assert decide_name(both, "example.org", 9000, "https").reason == (
        "TLS to port 9000 is not allowed for example.org (allowed: TLS to 443, plain HTTP to 80, 8443)")


def test_a_cidr_lets_an_inward_address_through_only_on_its_ports() -> None:
    policy = Network.allow("db.example.org:5432", cidrs=["10.0.0.0/8:5432"])
    inward = ipaddress.ip_address("10.1.2.3")
    assert decide_address(policy, inward, 5432, "https").allowed
    refused = decide_address(policy, inward, 443, "https")
    assert not refused.allowed and "in an allowed CIDR but not for TLS to port 443" in refused.reason
    assert decide_address(policy, ipaddress.ip_address("203.0.113.7"), 443, "https").allowed  # public


def test_open_allows_any_port_of_a_public_address() -> None:
    assert decide_name(Network.open(), "example.org", 2222, "https").allowed
    assert decide_name(Network.open(), "203.0.113.7", 2222, "http").allowed


def test_errand_toml_entries_take_ports(tmp_path: Path) -> None:
    # The face a user meets: [network] in errand.toml.
    (tmp_path / "errand.toml").write_text(
        '[network]\ndomains = ["registry.example.org", "registry.example.org:8443"]\n'
        'cidrs = ["203.0.113.0/24:8080"]\n')
    assert Environment.load(tmp_path).network == Network.allow(
        "registry.example.org", "registry.example.org:8443", cidrs=["203.0.113.0/24:8080"])
    (tmp_path / "errand.toml").write_text('[network]\ndomains = ["registry.example.org:http"]\n')
    with pytest.raises(ConfigError) as caught:
        Environment.load(tmp_path)
    assert caught.value.code == "invalid_port" and "[network] domains" in str(caught.value)


def test_registry_urls_become_entries_with_their_ports() -> None:
    assert entry_for_url("https://mirror.example.org/simple") == "mirror.example.org"
    assert entry_for_url("http://mirror.example.org:80/debian") == "mirror.example.org"
    assert entry_for_url("https://mirror.example.org:8443/simple") == "mirror.example.org:8443"
    assert entry_for_url("file:///opt/wheels") is None


def test_wildcards_are_strict() -> None:
    policy = Network.allow("*.example.net", "example.org")
    assert decide_name(policy, "a.example.net", 443, "https").allowed
    assert decide_name(policy, "b.a.example.net", 443, "https").allowed
    assert not decide_name(policy, "example.net", 443, "https").allowed  # subdomains only
    assert not decide_name(policy, "evilexample.net", 443, "https").allowed
    assert decide_name(policy, "EXAMPLE.ORG.", 443, "https").allowed
    assert not decide_name(policy, "a.example.org", 443, "https").allowed


@pytest.mark.parametrize("address", ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
                                     "100.64.0.1", "0.0.0.0", "::1", "fe80::1", "fd00:ec2::254", "::ffff:127.0.0.1",
                                     "64:ff9b::a00:1", "224.0.0.1"])
def test_inward_addresses_are_refused_unless_a_cidr_names_them(address: str) -> None:
    parsed = ipaddress.ip_address(address)
    assert not decide_address(Network.open(), parsed, 443, "https").allowed
    assert not decide_address(Network.allow("example.org"), parsed, 443, "https").allowed
    if parsed.version == 4:
        assert decide_address(Network.allow(cidrs=[f"{address}/32"]), parsed, 443, "https").allowed


@pytest.mark.parametrize("address", ["203.0.113.7", "198.51.100.1", "192.0.2.1", "2001:db8::1"])
def test_public_and_documentation_addresses_are_not_refused(address: str) -> None:
    assert decide_address(Network.open(), ipaddress.ip_address(address), 443, "https").allowed


def test_ip_literals_need_a_cidr() -> None:
    assert not decide_name(Network.allow("example.org"), "203.0.113.7", 443, "https").allowed
    assert decide_name(Network.allow(cidrs=["203.0.113.0/24"]), "203.0.113.7", 443, "https").allowed
    assert not decide_name(Network.none(), "example.org", 443, "https").allowed
    assert decide_name(Network.open(), "203.0.113.7", 443, "https").allowed
    assert not decide_name(Network.open(), "127.0.0.1", 443, "https").allowed
