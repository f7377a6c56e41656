"""Test hosts for egress tests: network namespaces on veth pairs, with servers that record what reaches them.

Every address a test may send traffic to is one this module assigned to a veth
pair it created (or loopback). Nothing here resolves a real name.

- :class:`TestCA` is a throwaway certificate authority made with the ``openssl``
  CLI; :meth:`TestCA.issue` signs a leaf certificate for test names and addresses.
- :class:`TestHost` is ``ip netns add ert-<random>`` plus a veth pair: the host
  end stays in the root namespace with the first address of a free /30 (and
  /64), the other end moves into the namespace with the second. A server
  process runs inside (``ip netns exec``; plain ``socketserver``, no reverse
  DNS) with HTTP on 80, HTTPS on 443, a TCP echo on 7, a TLS echo on 7443 and a
  UDP echo on 9, dual-stack, and appends every event (accept, TLS handshake and
  its SNI, HTTP request and its Host headers, UDP datagram) to a JSON-lines log
  the test reads back: "the server saw nothing" is an assertion, not a hope.
  With ``lenient_http=True`` its port 80 keeps connections alive and answers
  every request it reads, ``Connection: close`` or not, as origins that serve
  each pipelined request they have read do: whatever a proxy lets through on a
  connection reaches it, and is recorded.
- :class:`LoopbackRecorder` is a TCP listener on 127.0.0.1 that records accepts.
- :class:`EgressGuard` patches ``socket.getaddrinfo`` and
  ``asyncio.open_connection`` in this process (where errand's egress proxy
  runs) so that no name is ever looked up and no connection leaves for an
  address that is not loopback or a live test host; attempts are recorded, so a
  proxy that fails open fails the test instead of reaching the outside.

Root only (``ip netns``). Teardown kills the server by pid and deletes the
namespace and the veth pair; an ``atexit`` hook does the same if a run dies.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import fcntl
import hashlib
import ipaddress
import json
import os
import secrets
import select
import shutil
import signal
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "ALLOWED",
    "ECHO_PORT",
    "HTTPS_PORT",
    "HTTP_PORT",
    "LENIENT",
    "LOOPBACK",
    "METADATA",
    "OTHER",
    "PRIVATE",
    "TLS_ECHO_PORT",
    "UDP_PORT",
    "V6",
    "EgressGuard",
    "EgressHosts",
    "LoopbackRecorder",
    "TestCA",
    "TestHost",
    "expected_bytes",
    "live_addresses",
]

HTTP_PORT = 80
HTTPS_PORT = 443
ECHO_PORT = 7
TLS_ECHO_PORT = 7443
UDP_PORT = 9

PYTHON = "/usr/bin/python3"  # the real interpreter, not a version-manager shim

# TEST-NET-3 (documentation, and not refused by the proxy). Only its first
# quarter is used: on this kind of machine real services (the package index)
# resolve into documentation ranges too, and a test host must never take over
# an address something else on the machine is using.
_PUBLIC_RANGE = "203.0.113.0/26"
_PRIVATE_RANGE = "10.203.113.0/24"  # private: the proxy refuses it unless a CIDR allows it
_IPV6_PREFIX = "2001:db8:ee"  # documentation; host n gets 2001:db8:ee:<n>::/64

_lock = threading.Lock()
_live: dict[str, TestHost] = {}


def live_addresses() -> set[str]:
    """Every address owned by a live test host (either end of its veth)."""
    with _lock:
        hosts = list(_live.values())
    return {address for host in hosts for address in host.addresses()}


def expected_bytes(size: int) -> bytes:
    """The body the test servers send for ``GET /bytes/<size>``."""
    block = bytes(range(256)) * 256
    return (block * (size // len(block) + 1))[:size]


def expected_sha256(size: int) -> str:
    return hashlib.sha256(expected_bytes(size)).hexdigest()


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


# ----------------------------------------------------------------------- CA


class TestCA:
    """A throwaway certificate authority, made with the openssl CLI (EC P-256: fast handshakes)."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: str | Path | None = None) -> None:
        self._own = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="errand-test-ca-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cert = self.directory / "ca.pem"
        self.key = self.directory / "ca.key"
        _run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", str(self.key), "-out", str(self.cert), "-days", "2",
             "-subj", f"/CN=errand throwaway test CA {secrets.token_hex(4)}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        self._serial = 1

    @property
    def pem(self) -> bytes:
        return self.cert.read_bytes()

    def issue(self, names: list[str], addresses: list[str] = ()) -> tuple[Path, Path]:  # type: ignore[assignment]
        """A leaf certificate and key for these DNS names and IP addresses."""
        stem = self.directory / f"leaf{self._serial}"
        self._serial += 1
        sans = [f"DNS:{n}" for n in names] + [f"IP:{a}" for a in addresses]
        ext = stem.with_suffix(".ext")
        ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                       "extendedKeyUsage=serverAuth\nsubjectAltName=" + ",".join(sans) + "\n")
        key, csr, cert = stem.with_suffix(".key"), stem.with_suffix(".csr"), stem.with_suffix(".pem")
        _run("openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={names[0] if names else addresses[0]}")
        _run("openssl", "x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
             "-set_serial", str(self._serial + int(time.time())), "-days", "2", "-extfile", str(ext),
             "-out", str(cert))
        return cert, key

    def remove(self) -> None:
        if self._own:
            shutil.rmtree(self.directory, ignore_errors=True)


# ------------------------------------------------------------------- server

# Runs inside the test host's namespace as `python3 -c SERVER CONFIG_JSON`.
_SERVER = r'''
import json, socket, socketserver, ssl, sys, threading, time

cfg = json.loads(sys.argv[1])
lock = threading.Lock()
log = open(cfg["log"], "a")

def record(**event):
    event["t"] = time.time()
    peer = event.get("peer")
    if isinstance(peer, str) and peer.startswith("::ffff:"):
        event["peer"] = peer[7:]
    line = json.dumps(event) + "\n"
    with lock:
        log.write(line)
        log.flush()

tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
tls.load_cert_chain(cfg["cert"], cfg["key"])

def on_sni(sock, name, context):
    sock.errand_sni = name
    record(ev="sni", port=sock.getsockname()[1], sni=name, peer=sock.getpeername()[0])

tls.sni_callback = on_sni
BLOCK = bytes(range(256)) * 256

class Handler(socketserver.BaseRequestHandler):
    def setup(self):
        self.port = self.server.server_address[1]
        self.peer = self.client_address[0]
        record(ev="accept", port=self.port, peer=self.peer)
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request.settimeout(60)
        self.conn = self.request
        if self.server.tls:
            try:
                self.conn = tls.wrap_socket(self.request, server_side=True)
            except (OSError, ValueError) as error:
                record(ev="tls_error", port=self.port, peer=self.peer, error=str(error))
                self.conn = None
                return
            record(ev="tls", port=self.port, peer=self.peer, sni=getattr(self.conn, "errand_sni", None))

    def handle(self):
        if self.conn is None:
            return
        try:
            self.serve()
        except (OSError, ValueError) as error:
            record(ev="reset", port=self.port, peer=self.peer, error=str(error))

class Http(Handler):
    def serve(self):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.conn.recv(65536)
            if not chunk or len(data) > 65536:
                return
            data += chunk
        lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        method, target = (lines[0].split(" ") + ["", ""])[:2]
        hosts = [l.split(":", 1)[1].strip() for l in lines[1:]
                 if ":" in l and l.split(":", 1)[0].strip().lower() == "host"]
        record(ev="http", port=self.port, peer=self.peer, tls=self.server.tls, method=method, path=target,
               hosts=hosts, host=hosts[0] if hosts else None, headers=lines[1:])
        if target.startswith("/bytes/"):
            size = int(target[7:])
            self.conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                              b"Content-Length: %d\r\nConnection: close\r\n\r\n" % size)
            sent = 0
            while sent < size:
                piece = BLOCK[:min(len(BLOCK), size - sent)]
                self.conn.sendall(piece)
                sent += len(piece)
        else:
            body = ("hello from %s, host %s\n" % (cfg["label"], hosts[0] if hosts else "-")).encode()
            self.conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                              b"Connection: close\r\n\r\n%s" % (len(body), body))

class LenientHttp(Handler):
    """Every request on the connection, until the client closes it; bodies framed by
    Transfer-Encoding (chunked) if present, else by the first Content-Length."""
    def serve(self):
        self.buffer = b""
        sequence = 0
        while True:
            head = self.until(b"\r\n\r\n")
            if head is None:
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target = (lines[0].split(" ") + ["", ""])[:2]
            fields = [(l.split(":", 1)[0].strip().lower(), l.split(":", 1)[1].strip()) for l in lines[1:] if ":" in l]
            hosts = [v for k, v in fields if k == "host"]
            lengths = [v for k, v in fields if k == "content-length"]
            body = b""
            if any(k == "transfer-encoding" and "chunked" in v.lower() for k, v in fields):
                while True:
                    line = self.until(b"\r\n")
                    if line is None:
                        return
                    size = int(line.split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        self.until(b"\r\n")
                        break
                    body += self.take(size + 2)[:size]
            elif lengths:
                body = self.take(int(lengths[0]))
            record(ev="http", port=self.port, peer=self.peer, tls=False, method=method, path=target,
                   hosts=hosts, host=hosts[0] if hosts else None, body=len(body), sequence=sequence)
            sequence += 1
            reply = ("hello from %s, host %s, path %s\n" % (cfg["label"], hosts[0] if hosts else "-", target)).encode()
            self.conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
                              % (len(reply), reply))

    def until(self, mark):
        while mark not in self.buffer:
            chunk = self.conn.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        found, self.buffer = self.buffer.split(mark, 1)
        return found

    def take(self, size):
        while len(self.buffer) < size:
            chunk = self.conn.recv(65536)
            if not chunk:
                break
            self.buffer += chunk
        found, self.buffer = self.buffer[:size], self.buffer[size:]
        return found

class Echo(Handler):
    def serve(self):
        total = 0
        while True:
            chunk = self.conn.recv(65536)
            if not chunk:
                break
            total += len(chunk)
            self.conn.sendall(chunk)
        record(ev="echo_closed", port=self.port, peer=self.peer, bytes=total)

class Udp(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        record(ev="udp", port=self.server.server_address[1], peer=self.client_address[0], bytes=len(data))
        sock.sendto(data, self.client_address)

class DualStack:
    address_family = socket.AF_INET6
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 4096
    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

class TcpServer(DualStack, socketserver.ThreadingTCPServer):
    pass

class UdpServer(DualStack, socketserver.ThreadingUDPServer):
    pass

servers = []
for port, handler, use_tls in ((cfg["http"], LenientHttp if cfg["lenient_http"] else Http, False),
                               (cfg["https"], Http, True),
                               (cfg["echo"], Echo, False), (cfg["tls_echo"], Echo, True)):
    server = TcpServer(("::", port), handler)
    server.tls = use_tls
    servers.append(server)
servers.append(UdpServer(("::", cfg["udp"]), Udp))
for server in servers:
    threading.Thread(target=server.serve_forever, daemon=True).start()
sys.stdout.write("ready\n")
sys.stdout.flush()
threading.Event().wait()
'''


# --------------------------------------------------------------------- host


class TestHost:
    """A network namespace on a veth pair, with recording servers. Use as a context manager or start()/stop()."""

    __test__ = False  # not a pytest test class

    def __init__(self, ca: TestCA, *, label: str = "public", ipv4_range: str = _PUBLIC_RANGE,
                 ipv6: bool = True, names: tuple[str, ...] = ("*.errand.test", "errand.test"),
                 lenient_http: bool = False) -> None:
        self.ca = ca
        self.label = label
        self.lenient_http = lenient_http
        self._range = ipaddress.ip_network(ipv4_range)
        self._want_ipv6 = ipv6
        self._names = names
        tag = secrets.token_hex(3)
        self.netns = f"ert-{tag}"
        self.veth_host = f"ert{tag}h"
        self.veth_peer = f"ert{tag}p"
        self.host_ipv4 = self.ipv4 = ""
        self.host_ipv6 = self.ipv6 = ""
        self.network4: ipaddress.IPv4Network | None = None
        self.network6: ipaddress.IPv6Network | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._dir = Path(tempfile.mkdtemp(prefix=f"errand-testhost-{tag}-"))
        self.log = self._dir / "events.jsonl"
        self._created: list[str] = []

    # lifecycle

    def start(self) -> TestHost:
        try:
            # From choosing a free block until its addresses are on the veth pair, no other test
            # session (a pytest-xdist worker, another run on this machine) may choose too.
            with _lock, _machine_lock():
                self._allocate()
                _live[self.netns] = self
                self._make_namespace()
            self._start_server()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        with _lock:
            _live.pop(self.netns, None)
        if self.process is not None:
            if self.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)
            self.process = None
        if "veth" in self._created:
            _run("ip", "link", "del", self.veth_host, check=False)
        if "netns" in self._created:
            _run("ip", "netns", "del", self.netns, check=False)
        self._created.clear()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> TestHost:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def addresses(self) -> set[str]:
        return {a for a in (self.ipv4, self.host_ipv4, self.ipv6, self.host_ipv6) if a}

    # events

    def events(self, since: int = 0, **match: Any) -> list[dict[str, Any]]:
        """Events recorded by the server (from line ``since``), optionally only those matching ``match``."""
        try:
            lines = self.log.read_text().splitlines()[since:]
        except FileNotFoundError:
            return []
        found = [json.loads(line) for line in lines if line.strip()]
        return [e for e in found if all(e.get(k) == v for k, v in match.items())]

    def mark(self) -> int:
        """A position in the event log; pass it as ``since`` to see only what came after."""
        try:
            return len(self.log.read_text().splitlines())
        except FileNotFoundError:
            return 0

    def exec(self, *argv: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run a command inside this host's namespace."""
        return subprocess.run(["ip", "netns", "exec", self.netns, *argv], capture_output=True, text=True,
                              timeout=kwargs.pop("timeout", 60), **kwargs)

    # internals

    def _allocate(self) -> None:
        used = _used_networks()
        for block in self._range.subnets(new_prefix=30):
            if block.network_address == self._range.network_address:
                continue  # leave .0/30 alone: it reads like a default
            if not any(block.overlaps(n) for n in used if n.version == 4) and not _claimed(block):
                self.network4 = block
                break
        else:
            raise RuntimeError(f"no free /30 in {self._range} for a test host")
        hosts = list(self.network4.hosts())
        self.host_ipv4, self.ipv4 = str(hosts[0]), str(hosts[1])
        if self._want_ipv6:
            for n in range(1, 0xFFFF):
                block6 = ipaddress.ip_network(f"{_IPV6_PREFIX}:{n:x}::/64")
                if not any(block6.overlaps(u) for u in used if u.version == 6) and not _claimed(block6):
                    self.network6 = block6
                    break
            assert self.network6 is not None
            self.host_ipv6, self.ipv6 = str(self.network6[1]), str(self.network6[2])

    def _make_namespace(self) -> None:
        _run("ip", "netns", "add", self.netns)
        self._created.append("netns")
        _run("ip", "link", "add", self.veth_host, "type", "veth", "peer", "name", self.veth_peer)
        self._created.append("veth")
        _run("ip", "link", "set", self.veth_peer, "netns", self.netns)
        assert self.network4 is not None
        prefix = self.network4.prefixlen
        _run("ip", "addr", "add", f"{self.host_ipv4}/{prefix}", "dev", self.veth_host)
        _run("ip", "-n", self.netns, "addr", "add", f"{self.ipv4}/{prefix}", "dev", self.veth_peer)
        if self.network6 is not None:
            _run("ip", "addr", "add", f"{self.host_ipv6}/64", "dev", self.veth_host, "nodad")
            _run("ip", "-n", self.netns, "addr", "add", f"{self.ipv6}/64", "dev", self.veth_peer, "nodad")
        _run("ip", "link", "set", self.veth_host, "up")
        _run("ip", "-n", self.netns, "link", "set", "lo", "up")
        _run("ip", "-n", self.netns, "link", "set", self.veth_peer, "up")

    def _start_server(self) -> None:
        cert, key = self.ca.issue(list(self._names), sorted(a for a in (self.ipv4, self.ipv6) if a))
        config = {"log": str(self.log), "cert": str(cert), "key": str(key), "label": self.label,
                  "http": HTTP_PORT, "https": HTTPS_PORT, "echo": ECHO_PORT, "tls_echo": TLS_ECHO_PORT,
                  "udp": UDP_PORT, "lenient_http": self.lenient_http}
        self.log.touch()
        stderr = open(self._dir / "server.err", "wb")  # noqa: SIM115 - the child keeps it
        try:
            self.process = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, PYTHON, "-c", _SERVER, json.dumps(config)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr)
        finally:
            stderr.close()
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 20)
        line = self.process.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            raise RuntimeError(f"test host server did not start: {(self._dir / 'server.err').read_text()}")
        self.process.stdout.close()
        # The host side must reach the server before anyone relies on it.
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((self.ipv4, ECHO_PORT), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def _used_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Networks already configured or routed in the root namespace (never reuse them)."""
    used: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for family in ("-4", "-6"):
        for entry in json.loads(_run("ip", "-j", family, "addr").stdout or "[]"):
            for info in entry.get("addr_info", []):
                used.append(ipaddress.ip_interface(f"{info['local']}/{info['prefixlen']}").network)
        for route in json.loads(_run("ip", "-j", family, "route", "show", "table", "all").stdout or "[]"):
            dst = route.get("dst", "default")
            if dst in ("default", "") or route.get("type") in ("broadcast", "multicast"):
                continue
            with contextlib.suppress(ValueError):
                used.append(ipaddress.ip_network(dst, strict=False))
    return used


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    """Held by one process of this machine at a time (the kernel lets go when the process ends)."""
    with open(os.path.join(tempfile.gettempdir(), "errand-test-hosts.lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _claimed(block: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    for host in _live.values():
        for mine in (host.network4, host.network6):
            if mine is not None and mine.version == block.version and mine.overlaps(block):
                return True
    return False


@atexit.register
def _stop_all() -> None:
    for host in list(_live.values()):
        host.stop()


# ------------------------------------------------------------- loopback recorder


class LoopbackRecorder:
    """A TCP listener on 127.0.0.1 (in this, the host's, namespace) that records every accept."""

    def __init__(self) -> None:
        self.accepts: list[tuple[str, int]] = []
        recorder = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                recorder.accepts.append(self.client_address)
                with contextlib.suppress(OSError):
                    self.request.settimeout(2)
                    self.request.recv(1024)

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LoopbackRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------ the guard


class EgressGuard:
    """No DNS and no connection to anything but loopback and live test hosts, from this process.

    errand's proxy resolves with ``socket.getaddrinfo`` (on threads of its own)
    and connects with ``asyncio.open_connection``; both are patched. Names are
    never looked up: a lookup is recorded in ``lookups`` and fails as "no such
    name". Numeric forms the C library parses without DNS (``127.1``,
    ``0177.0.0.1``, ``2130706433``) and ``localhost`` (the hosts file) are passed
    through, so the proxy's handling of them is exercised. A connection to any
    other address is recorded in ``violations`` and fails as unreachable.
    """

    def __init__(self, extra_allowed: Callable[[], set[str]] = live_addresses) -> None:
        self.lookups: list[str] = []
        self.connects: list[tuple[str, int]] = []
        self.violations: list[tuple[str, int]] = []
        self._extra = extra_allowed
        self._saved: list[tuple[Any, str, Any]] = []

    def allowed(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host.split("%")[0])
        except ValueError:
            return False
        mapped = getattr(address, "ipv4_mapped", None) or address
        return mapped.is_loopback or str(mapped) in self._extra() or str(address) in self._extra()

    def __enter__(self) -> EgressGuard:
        real_getaddrinfo = socket.getaddrinfo
        real_open_connection = asyncio.open_connection
        guard = self

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            name = host.decode() if isinstance(host, bytes) else host
            if name is None or name == "localhost":
                return real_getaddrinfo(host, port, *args, **kwargs)
            try:
                real_getaddrinfo(name, port, 0, 0, 0, socket.AI_NUMERICHOST)
            except (socket.gaierror, UnicodeError, ValueError):
                guard.lookups.append(name)
                raise socket.gaierror(socket.EAI_NONAME, "EgressGuard: no DNS in egress tests") from None
            return real_getaddrinfo(host, port, *args, **kwargs)

        async def open_connection(host: Any = None, port: Any = None, **kwargs: Any) -> Any:
            guard.connects.append((str(host), int(port or 0)))
            if not guard.allowed(str(host)):
                guard.violations.append((str(host), int(port or 0)))
                raise OSError(errno.ENETUNREACH, f"EgressGuard: {host} is not a test host")
            return await real_open_connection(host, port, **kwargs)

        for owner, attribute, value in ((socket, "getaddrinfo", getaddrinfo),
                                        (asyncio, "open_connection", open_connection)):
            self._saved.append((owner, attribute, getattr(owner, attribute)))
            setattr(owner, attribute, value)
        return self

    def __exit__(self, *exc: object) -> None:
        while self._saved:
            owner, attribute, value = self._saved.pop()
            setattr(owner, attribute, value)


# ------------------------------------------------------------------ test names

ALLOWED = "allowed.errand.test"  # the public-looking test host, allowed by the tests' policies
OTHER = "other.errand.test"  # the same host under a name the policies do not allow
V6 = "v6.errand.test"  # the public-looking test host's IPv6 address
PRIVATE = "private.errand.test"  # the private (10.203.113.x) test host
LOOPBACK = "loop.errand.test"  # rebinds to 127.0.0.1
METADATA = "meta.errand.test"  # rebinds to the cloud metadata address
LENIENT = "lenient.errand.test"  # a test host whose port 80 answers every request it reads (lenient_http)


class EgressHosts:
    """The test names and where ``ERRAND_EGRESS_HOSTS`` sends them; ``add`` maps more.

    ``setenv`` is how the variable is set (``monkeypatch.setenv`` in tests, so it
    is restored afterwards); errand's proxy reads it at each request.
    """

    def __init__(self, setenv: Callable[[str, str], None], public: TestHost, private: TestHost | None = None,
                 guard: EgressGuard | None = None) -> None:
        self._setenv = setenv
        self.public, self.private, self.guard = public, private, guard
        self.mapping: dict[str, list[str]] = {
            ALLOWED: [public.ipv4], OTHER: [public.ipv4], LOOPBACK: ["127.0.0.1"], METADATA: ["169.254.169.254"],
        }
        if public.ipv6:
            self.mapping[V6] = [public.ipv6]
        if private is not None:
            self.mapping[PRIVATE] = [private.ipv4]
        self._apply()

    def add(self, name: str, *addresses: str) -> None:
        self.mapping[name] = list(addresses)
        self._apply()

    def _apply(self) -> None:
        self._setenv("ERRAND_EGRESS_HOSTS", ",".join(
            f"{name}={address}" for name, addresses in self.mapping.items() for address in addresses))


@contextlib.contextmanager
def public_test_hosts(count: int = 1) -> Iterator[tuple[TestCA, list[TestHost]]]:
    """A CA and ``count`` public-looking test hosts, removed afterwards (for scripts)."""
    ca = TestCA()
    hosts: list[TestHost] = []
    try:
        for n in range(count):
            hosts.append(TestHost(ca, label=f"public{n}").start())
        yield ca, hosts
    finally:
        for host in hosts:
            host.stop()
        ca.remove()
