"""Reading the server name a TLS client asks for (SNI) from its ClientHello, as the egress proxy
does before it decides: real ClientHellos from Python's ssl module, and anything else refused
as None, never an exception."""

from __future__ import annotations

import ssl

import pytest

from errand.sandbox._egress.tls import TLS_RECORD_HEADER, client_hello_length, server_name


def client_hello(host: str | None) -> bytes:
    """The first record a real TLS client sends to ``host`` (no SNI for None)."""
    context = ssl.create_default_context()
    if host is None:
        context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=host)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize(("host", "name"), [("example.test", "example.test"), ("API.Mirror.Test", "api.mirror.test"),
                                            ("a-long-name." * 10 + "test", "a-long-name." * 10 + "test")])
def test_the_name_a_client_asks_for_is_read_lowercased(host: str, name: str) -> None:
    record = client_hello(host)
    assert client_hello_length(record[:TLS_RECORD_HEADER]) == len(record)
    assert server_name(record) == name


def test_a_client_hello_without_a_name_has_none() -> None:
    assert server_name(client_hello(None)) is None


@pytest.mark.parametrize("header", [b"GET /", b"\x16\x03", b"\x16\x02\x01\x00\x10", b"\x17\x03\x03\x00\x10", b""])
def test_what_is_not_a_tls_handshake_has_no_length(header: bytes) -> None:
    assert client_hello_length(header) is None


def test_a_truncated_or_garbled_record_has_no_name() -> None:
    record = client_hello("example.test")
    name_list = record.index(b"example.test") - 5  # the server_name extension's list header
    for cut in (6, 44, name_list + 2, name_list + 5 + len("example")):
        assert server_name(record[:cut]) is None
    assert server_name(b"GET / HTTP/1.1\r\nHost: example.test\r\n\r\n") is None
    not_a_hello = record[:5] + b"\x02" + record[6:]  # a ServerHello's type
    assert server_name(not_a_hello) is None


def test_a_name_whose_length_runs_past_its_extension_is_refused() -> None:
    """A crafted hello: what the proxy would read as the name is not what a server parsing the same
    bytes would take for it."""
    record = bytearray(client_hello("example.test.elsewhere.example"))
    name = record.index(b"example.test.elsewhere.example")
    record[name - 2:name] = (len("example.test.elsewhere.example") + 40).to_bytes(2, "big")
    assert server_name(bytes(record)) is None
