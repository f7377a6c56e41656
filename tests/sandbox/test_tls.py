"""Reading the server name a TLS client asks for (SNI) from its ClientHello, as the egress proxy
does before it decides: real ClientHellos from Python's ssl module, and anything else refused
as None, never an exception."""

from __future__ import annotations

import ssl

import pytest

from errand.sandbox._egress.tls import TLS_RECORD_HEADER, UnreadableHello, client_hello_length, server_name


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


def unreadable(record: bytes) -> str:
    with pytest.raises(UnreadableHello) as refused:
        server_name(record)
    return str(refused.value)


def test_a_truncated_or_garbled_record_is_unreadable_not_a_hello_without_a_name() -> None:
    """None means a whole hello that names no server (allowed for a CONNECT to an address): a
    record cut short, even inside the name, is not that."""
    record = client_hello("example.test")
    name_list = record.index(b"example.test") - 5  # the server_name extension's list header
    for cut in (6, 44, name_list + 2, name_list + 5 + len("example"), len(record) - 1):
        assert "cut short" in unreadable(record[:cut])
    assert "not a ClientHello" in unreadable(b"GET / HTTP/1.1\r\nHost: example.test\r\n\r\n")
    assert "not a ClientHello" in unreadable(record[:5] + b"\x02" + record[6:])  # a ServerHello's type


def _renamed(record: bytes, *names: bytes) -> bytes:
    """``record`` (a real hello naming example.test) with its server_name extension holding
    ``names`` instead, every length above it made right again."""
    old = record.index(b"example.test") - 9  # the extension: type, length, list length, name type, name length
    ext_length = int.from_bytes(record[old + 2:old + 4], "big")
    entries = b"".join(b"\x00" + len(name).to_bytes(2, "big") + name for name in names)
    body = len(entries).to_bytes(2, "big") + entries
    extension = b"\x00\x00" + len(body).to_bytes(2, "big") + body
    grown = len(extension) - (4 + ext_length)
    hello = bytearray(record[:old] + extension + record[old + 4 + ext_length:])
    hello[3:5] = (int.from_bytes(hello[3:5], "big") + grown).to_bytes(2, "big")
    hello[6:9] = (int.from_bytes(hello[6:9], "big") + grown).to_bytes(3, "big")
    extensions_length = _extensions_at(record)
    hello[extensions_length:extensions_length + 2] = (
        int.from_bytes(hello[extensions_length:extensions_length + 2], "big") + grown).to_bytes(2, "big")
    return bytes(hello)


def _extensions_at(record: bytes) -> int:
    """Where the hello's extensions' u16 length is."""
    at = 5 + 4 + 2 + 32
    at += 1 + record[at]
    at += 2 + int.from_bytes(record[at:at + 2], "big")
    return at + 1 + record[at]


def test_names_a_server_would_read_otherwise_are_unreadable() -> None:
    record = client_hello("example.test")
    assert server_name(_renamed(record, b"Other.Test.")) == "other.test"  # the builder itself is right
    assert "not one host name" in unreadable(_renamed(record, b"allowed.test", b"evil.example"))
    assert "not a host name" in unreadable(_renamed(record, b"allowed.test.."))
    assert "not a host name" in unreadable(_renamed(record, "allowed.tést".encode()))
    assert "not a host name" in unreadable(_renamed(record, b""))
    assert "not a host name" in unreadable(_renamed(record, b"allowed.test\x00.evil.example"))


def test_a_hello_split_over_two_records_is_unreadable() -> None:
    """A server puts the records together and reads the name the first one lacks: the proxy, which
    reads the first, refuses rather than take it for a hello without a name."""
    record = client_hello("evil.example")
    cut = record.index(b"evil.example") - 9
    first = record[:3] + (cut - 5).to_bytes(2, "big") + record[5:cut]
    assert "split over several records" in unreadable(first)


def test_a_name_whose_length_runs_past_its_extension_is_refused() -> None:
    """A crafted hello: what the proxy would read as the name is not what a server parsing the same
    bytes would take for it."""
    record = bytearray(client_hello("example.test.elsewhere.example"))
    name = record.index(b"example.test.elsewhere.example")
    record[name - 2:name] = (len("example.test.elsewhere.example") + 40).to_bytes(2, "big")
    assert "not one host name" in unreadable(bytes(record))


def test_an_extension_twice_is_unreadable() -> None:
    record = client_hello("example.test")
    old = record.index(b"example.test") - 9
    ext_length = int.from_bytes(record[old + 2:old + 4], "big")
    extension = record[old:old + 4 + ext_length]
    doubled = bytearray(record[:old] + extension + record[old:])
    for at, size in ((3, 2), (6, 3), (_extensions_at(record), 2)):
        doubled[at:at + size] = (int.from_bytes(doubled[at:at + size], "big") + len(extension)).to_bytes(size, "big")
    assert "twice" in unreadable(bytes(doubled))
