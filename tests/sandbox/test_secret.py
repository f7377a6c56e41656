"""Declared secrets as values: what a declaration may say, and the swap the proxy makes with it.

The swap through a real proxy and sandbox is in tests/security/test_egress_secrets.py.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from typer.testing import CliRunner

from errand import AsyncSandbox, ConfigError, Network, Secret
from errand.cli import app
from errand.sandbox._egress.intercept import Interceptor
from errand.sandbox.secret import check_secrets


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"name": "GH TOKEN", "value": "v", "hosts": ["api.example.org"]}, "environment variable name"),
    ({"name": "GH_TOKEN", "value": "", "hosts": ["api.example.org"]}, "non-empty printable ASCII"),
    ({"name": "GH_TOKEN", "value": "v\r\nX-Injected: 1", "hosts": ["api.example.org"]}, "printable ASCII"),
    ({"name": "GH_TOKEN", "value": "v", "hosts": []}, "names no hosts"),
    ({"name": "GH_TOKEN", "value": "v", "hosts": ["*"]}, "every domain"),
    ({"name": "GH_TOKEN", "value": "v", "hosts": ["203.0.113.7"]}, "an address"),
])
def test_a_bad_declaration_is_refused_with_its_reason(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigError, match=words) as caught:
        Secret(**kwargs)  # type: ignore[arg-type]
    assert caught.value.code in ("invalid_secret", "overbroad_domain", "invalid_domain")


def test_the_value_is_never_in_a_repr_or_an_error() -> None:
    secret = Secret("GH_TOKEN", "ghp_realvalue", hosts=["api.example.org"])
    assert "ghp_realvalue" not in repr(secret)
    with pytest.raises(ConfigError) as caught:
        check_secrets([secret], Network.allow("example.org"))
    assert "ghp_realvalue" not in str(caught.value)


def test_a_secret_needs_its_hosts_allowed_and_a_name_of_its_own() -> None:
    secret = Secret("GH_TOKEN", "v", hosts=["api.example.org", "*.example.net:8443"])
    assert check_secrets([secret], Network.allow("api.example.org", "*.example.net:8443")) == (secret,)
    with pytest.raises(ConfigError, match=r"\*.example.net:8443, which the network policy does not allow"):
        check_secrets([secret], Network.allow("api.example.org", "*.example.net"))
    with pytest.raises(ConfigError, match="not allow"):
        check_secrets([secret], Network.none())
    with pytest.raises(ConfigError, match="both a secret and an environment variable"):
        check_secrets([secret], Network.open(), env=[("GH_TOKEN", "x")])
    with pytest.raises(ConfigError, match="share a name"):
        check_secrets([secret, Secret("GH_TOKEN", "w", hosts=["api.example.org"])], Network.open())


async def test_a_refused_declaration_starts_no_sandbox() -> None:
    before = await AsyncSandbox.list()
    with pytest.raises(ConfigError, match="does not allow") as caught:
        await AsyncSandbox.create(network=Network.allow("example.org"), detach=True,
                                  secrets=[Secret("GH_TOKEN", "v", hosts=["api.example.org"])])
    assert caught.value.code == "invalid_secret"
    assert await AsyncSandbox.list() == before


def test_the_state_a_supervisor_is_handed_is_the_same_interceptor() -> None:
    interceptor = Interceptor((Secret("GH_TOKEN", "ghp_real", hosts=["api.example.org"]),))
    again = Interceptor.from_state(interceptor.to_state())
    assert (again.placeholders, again.ca_pem, again.secrets) == (
        interceptor.placeholders, interceptor.ca_pem, interceptor.secrets)
    head = f"GET / HTTP/1.1\r\nAuthorization: Bearer {interceptor.placeholders['GH_TOKEN']}\r\n\r\n".encode()
    assert again.swap(head, "api.example.org", 443) == interceptor.swap(head, "api.example.org", 443)
    again.server_context("api.example.org", lambda name: True)
    leaf = x509.load_pem_x509_certificate(again._leaves["api.example.org"])
    leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(interceptor.ca_pem))


def test_the_swap_is_for_the_declared_host_and_port_only() -> None:
    interceptor = Interceptor((Secret("GH_TOKEN", "ghp_real", hosts=["api.example.org"]),
                               Secret("NPM_TOKEN", "npm_real", hosts=["*.example.net:8443"])))
    gh, npm = interceptor.placeholders["GH_TOKEN"], interceptor.placeholders["NPM_TOKEN"]
    assert gh != npm and "real" not in gh + npm
    basic = base64.b64encode(f"x-access-token:{gh}".encode()).decode()
    head = (f"GET /?t={gh} HTTP/1.1\r\nHost: api.example.org\r\nAuthorization: Bearer {gh}\r\n"
            f"X-Other: {npm}\r\nauthorization: basic {basic}\r\n\r\n").encode()
    swapped = interceptor.swap(head, "api.example.org", 443).decode()
    assert swapped.count("ghp_real") == 1 and "Authorization: Bearer ghp_real\r\n" in swapped
    assert f"GET /?t={gh} HTTP/1.1" in swapped  # the request line keeps the placeholder
    assert f"X-Other: {npm}" in swapped  # another secret's placeholder, for another host
    assert base64.b64decode(swapped.split("basic ")[1].split("\r\n")[0]) == b"x-access-token:ghp_real"
    assert interceptor.swap(head, "api.example.org", 8443) == head
    assert interceptor.swap(head, "evil.example.org", 443) == head
    assert "npm_real" not in interceptor.swap(head, "registry.example.net", 8443).decode()  # X-Other
    npm_head = f"GET / HTTP/1.1\r\nAuthorization: Bearer {npm}\r\n\r\n".encode()
    assert b"Bearer npm_real\r\n" in interceptor.swap(npm_head, "registry.example.net", 8443)
    assert interceptor.covers("API.example.org.", 443) and not interceptor.covers("example.net", 8443)


def test_the_value_goes_into_its_header_alone_so_nothing_a_server_echoes_holds_it() -> None:
    """A red team's find: swapped everywhere in the head, the value came back to the sandbox in a
    404 page quoting the path, a trailing-slash redirect's Location, CORS's Allow-Origin and an
    echoed request id. Only the credential header carries it now."""
    interceptor = Interceptor((Secret("API_TOKEN", "real-value", hosts=["api.example.org"]),
                               Secret("LAB", "glpat-real", hosts=["api.example.org"], header="PRIVATE-TOKEN")))
    token, lab = interceptor.placeholders["API_TOKEN"], interceptor.placeholders["LAB"]
    head = (f"GET /notfound/{token}?token={token} HTTP/1.1\r\nHost: api.example.org\r\n"
            f"Origin: https://{token}\r\nX-Request-Id: {token}\r\nAccess-Control-Request-Headers: x-{token}\r\n"
            f"X-{token}: 1\r\nAuthorization: Bearer {token}\r\nPrivate-Token: {lab}\r\n"
            f"X-Authorization: {token}\r\n\r\n").encode()
    swapped = interceptor.swap(head, "api.example.org", 443).decode()
    assert swapped.count("real-value") == 1 and "Authorization: Bearer real-value\r\n" in swapped
    assert "Private-Token: glpat-real\r\n" in swapped and swapped.count("glpat-real") == 1
    assert swapped.count(token) == head.decode().count(token) - 1
    again = Interceptor.from_state(interceptor.to_state())  # a detached sandbox's supervisor
    assert again.swap(head, "api.example.org", 443) == interceptor.swap(head, "api.example.org", 443)


async def test_a_refusal_quoting_what_a_declared_host_sent_names_the_secret_instead_of_its_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A red team's find: a declared host that echoed the value into a malformed chunked trailer
    got 40 characters of it quoted in the refusal, which the egress log and the task's events keep."""
    from errand.sandbox._egress import proxy as proxies

    answered: list[str] = []

    async def reply(_writer: object, _status: int, reason: str) -> None:
        answered.append(reason)

    monkeypatch.setattr(proxies, "_reply", reply)
    interceptor = Interceptor((Secret("API_TOKEN", "real-value-123", hosts=["api.example.org"]),))
    proxy = proxies.EgressProxy()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "proxy.sock"))
    log = tmp_path / "egress.log"
    await proxy.serve("sb", listener, Network.allow("api.example.org"), log, interceptor)
    ours, theirs = socket.socketpair()
    try:
        _reader, writer = await asyncio.open_connection(sock=theirs)
        refusal = proxies.Refused("malformed header line 'real-value-123 junk'", 502)
        await proxy._refuse("sb", proxies._Connection(writer.transport), writer, refusal)
        writer.close()
    finally:
        ours.close()
        await proxy.stop("sb")
    assert answered == ["malformed header line '<API_TOKEN> junk'"]
    logged = log.read_text()
    assert "real-value-123" not in logged and "<API_TOKEN>" in logged


async def test_a_secrets_value_in_the_environment_under_another_name_is_refused() -> None:
    """A red team's find: only a clashing name was refused, so the value could sit in the sandbox
    in clear under another name while its placeholder looked protected."""
    with pytest.raises(ConfigError) as raised:
        await AsyncSandbox.create(network=Network.allow("api.example.org"), env={"OTHER": "x-real-value-y"},
                                  secrets=[Secret("API_TOKEN", "real-value", hosts=["api.example.org"])])
    assert raised.value.code == "invalid_secret" and "real-value" not in str(raised.value)


@pytest.mark.parametrize("header", ["", "Bad Header", "X:Y", "A\r\nB", 7])
def test_a_secrets_header_must_be_a_header_name(header: object) -> None:
    with pytest.raises(ConfigError) as raised:
        Secret("T", "v", hosts=["api.example.org"], header=header)  # type: ignore[arg-type]
    assert raised.value.code == "invalid_secret"


def test_each_sandbox_has_its_own_ca_and_its_leaves_are_signed_by_it() -> None:
    one, two = (Interceptor((Secret("T", "v", hosts=["api.example.org"]),)) for _ in range(2))
    assert one.ca_pem != two.ca_pem
    assert b"PRIVATE KEY" not in one.ca_pem
    ca = x509.load_pem_x509_certificate(one.ca_pem)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    context = one.server_context("api.example.org", lambda name: True)
    assert isinstance(context, ssl.SSLContext)
    leaf = x509.load_pem_x509_certificate(one._leaves["api.example.org"])
    leaf.verify_directly_issued_by(ca)
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["api.example.org"]


@pytest.mark.parametrize(("option", "words"), [
    ("ERRAND_TEST_UNSET_TOKEN:api.example.org", "is not set here"),
    ("ERRAND_TEST_UNSET_TOKEN", "NAME:HOST"),
    (":api.example.org", "NAME:HOST"),
])
def test_the_cli_declares_a_secret_from_its_environment_or_says_why_not(option: str, words: str) -> None:
    before = asyncio.run(AsyncSandbox.list())
    result = CliRunner().invoke(app, ["sandbox", "create", "--allow", "api.example.org", "--secret", option])
    assert result.exit_code != 0
    assert words in result.output
    assert asyncio.run(AsyncSandbox.list()) == before
