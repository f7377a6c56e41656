#!/usr/bin/env python3
"""Network-escape attempts against errand and two peer sandboxes, side by side.

    .venv/bin/python benchmarks/peers_egress.py [--peers-dir /tmp/peers] [--runs 10] [--keep] [--quick]

The peers are Codex's Linux sandbox (npm ``@openai/codex``, run as ``codex sandbox -- CMD``) and
Anthropic's sandbox-runtime (npm ``@anthropic-ai/sandbox-runtime``, run as ``srt --settings F -c CMD``),
installed beforehand with::

    npm install --prefix /tmp/peers @openai/codex @anthropic-ai/sandbox-runtime

(sandbox-runtime also needs ``bwrap``, ``socat`` and ``rg`` on the host). A peer that is not under
``--peers-dir`` gets "not installed" in its column; one that is there but cannot run says why.

Every sandbox gets the same policy: HTTPS/HTTP egress to three names only (``allowed``,
``rebind-lo`` and ``rebind-priv`` under ``ert-peers.test``). The script builds its own test hosts
and sends traffic nowhere else:

* a "public-looking" host in network namespace ``ert-peer-<rand>`` (TEST-NET-3, 203.0.113.0/24, two
  addresses: one named ``allowed``, one named ``denied`` and ``other``; plus an address from
  2001:db8:ee::/64), serving HTTP on 80, TLS on 443 (self-signed) and UDP echo on 5353;
* a "private" host in ``ert-peer-<rand>-p`` (10.203.114.0/24) serving HTTP and TLS;
* an HTTP server on the host's 127.0.0.1 and one on a Unix socket under /tmp.

Each server answers ``ERT-OK net=<host> addr=<address it was reached on> host=<Host header>
sni=<TLS server name>``, so a probe can tell exactly what got through. Names are mapped with each
tool's own mechanism: ``ERRAND_EGRESS_HOSTS`` for errand's proxy, and a marked block in the host's
/etc/hosts for the peers, whose proxies resolve through the system resolver. No DNS query for a
real name is made.

Probes are small Python snippets (stock ``curl`` for one control row) run with the host's
/usr/bin/python3 inside each sandbox; each cell says ``allowed`` (the output proves the server was
reached) or ``blocked`` with the reason the sandbox or its proxy gave.

The rows that depend on what a name resolves to (1, 1c, 2, 4, 5a, 5b) run twice: with the names on
the host's IPv4 addresses (TEST-NET-3) and again with them on its IPv6 addresses (2001:db8::/32).
Codex's proxy refuses every TEST-NET-3 address as "local/private", so only the second pass shows
how it handles those attempts.

Timing: ``true`` in a fresh sandbox, p50 of ``--runs``: errand in-process through its Python API
(plus, below the table, the same from a fresh Python process), the peers as one CLI invocation.

Setup is idempotent: resources of an earlier run that died (recorded in a state file) are removed
first. Everything is removed again at the end, also on an error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ipaddress
import json
import os
import secrets
import select
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

STATE_FILE = Path("/tmp/ert-peers-egress.state.json")
HOSTS_FILE = Path("/etc/hosts")
HOSTS_BEGIN = "# BEGIN ert-peers-egress (benchmarks/peers_egress.py; removed when it ends)"
HOSTS_END = "# END ert-peers-egress"
DOMAIN = "ert-peers.test"
ALLOWED, DENIED, OTHER = f"allowed.{DOMAIN}", f"denied.{DOMAIN}", f"other.{DOMAIN}"
REBIND_LO, REBIND_PRIV = f"rebind-lo.{DOMAIN}", f"rebind-priv.{DOMAIN}"
ALLOWLIST = (ALLOWED, REBIND_LO, REBIND_PRIV)
PY = "/usr/bin/python3"  # inside every sandbox: the host's /usr
CMD_TIMEOUT = 40.0
SERVER_MARK = "ert-peers-egress-server"  # in every server's argv: cleanup checks it before a kill

# ----------------------------------------------------------------------------- servers

SERVER_CODE = r"""
import os, socket, socketserver, ssl, sys, threading, time
label, cert, key = sys.argv[2], sys.argv[3], sys.argv[4]
timer = threading.Timer(3600, os._exit, (0,))  # never outlive a forgotten cleanup by long
timer.daemon = True
timer.start()
seen = {}
def tls_context():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.sni_callback = lambda sock, name, _ctx: seen.__setitem__(id(sock), name)
    return ctx
class Stream(socketserver.BaseRequestHandler):
    def handle(self):
        conn = self.request
        conn.settimeout(10)
        sni = "-"
        if self.server.tls is not None:
            try:
                conn = self.server.tls.wrap_socket(conn, server_side=True)
            except (OSError, ssl.SSLError):
                return
            sni = seen.pop(id(conn), None) or "none"
        data = b""
        try:
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        host = "-"
        for line in data.split(b"\r\n")[1:]:
            if line.lower().startswith(b"host:"):
                host = line[5:].strip().decode("latin-1")
        local = conn.getsockname()
        addr = local[0] if isinstance(local, tuple) else "unix"
        if addr.startswith("::ffff:"):
            addr = addr[7:]
        body = f"ERT-OK net={label} addr={addr} host={host} sni={sni}\n".encode()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
        conn.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        conn.close()
class Datagram(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        local = sock.getsockname()[0]
        sock.sendto(f"ERT-OK net={label} addr={local} udp\n".encode(), self.client_address)
class TCP4(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
class TCP6(TCP4):
    address_family = socket.AF_INET6
    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()
class UDP6(socketserver.ThreadingUDPServer):
    address_family = socket.AF_INET6
    allow_reuse_address = True
    daemon_threads = True
    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()
class Unix(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
ports = []
for spec in sys.argv[5:]:
    kind, _, rest = spec.partition(":")
    if kind == "unix":
        server = Unix(rest, Stream)
        os.chmod(rest, 0o777)
        server.tls = None
    else:
        host, _, port = rest.rpartition(":")
        host = host.strip("[]")
        if kind == "udp":
            server = UDP6((host, int(port)), Datagram)
        else:
            server = (TCP6 if ":" in host else TCP4)((host, int(port)), Stream)
            server.tls = tls_context() if kind == "tls" else None
        ports.append(str(server.server_address[1]))
    threading.Thread(target=server.serve_forever, daemon=True).start()
print("READY", *ports, flush=True)
while True:
    time.sleep(3600)
"""

# ----------------------------------------------------------------------------- probes (run inside)

PROBE_CODE = r"""
import base64, json, os, socket, ssl, struct, sys, time, urllib.parse
attempt, p = sys.argv[1], json.loads(sys.argv[2])
class Blocked(Exception):
    pass
def proxy():
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        if os.environ.get(name):
            u = urllib.parse.urlsplit(os.environ[name])
            auth = None
            if u.username is not None:
                cred = urllib.parse.unquote(u.username) + ":" + urllib.parse.unquote(u.password or "")
                auth = "Basic " + base64.b64encode(cred.encode()).decode()
            return u.hostname, u.port or 80, auth
    raise Blocked("no HTTP proxy in the environment")
def read_all(sock):
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, OSError):
        pass
    return data.decode("latin-1")
def read_head(sock):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data.decode("latin-1")
def via_proxy(request_line, headers):
    host, port, auth = proxy()
    s = socket.create_connection((host, port), timeout=8)
    lines = [request_line] + headers + (["Proxy-Authorization: " + auth] if auth else [])
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return s
def tunnel(target):
    s = via_proxy(f"CONNECT {target} HTTP/1.1", [f"Host: {target}"])
    head = read_head(s)
    status = head.split("\r\n", 1)[0]
    if " 200" not in status:
        code = status.split(" ")[1] if " " in status else "connection closed"
        raise Blocked(f"CONNECT {code}: {body_reason(read_all(s))}")
    return s
def body_reason(body):
    body = body.strip()
    if body.startswith("{"):
        try:
            data = json.loads(body)
            return f"{data.get('reason')} ({data.get('source', '')})"
        except ValueError:
            pass
    return body[:160]
def tls_get(sock, sni, host):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    t = ctx.wrap_socket(sock, server_hostname=sni)
    t.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    return read_all(t)
def plain_get(addr, port, host):
    s = socket.create_connection((addr, port), timeout=5)
    s.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    return read_all(s)
def proxied_get(url, host):
    s = via_proxy(f"GET {url} HTTP/1.1", [f"Host: {host}", "Connection: close"])
    return read_all(s)
def checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF
def run():
    if attempt == "https":
        return tls_get(tunnel(p["target"]), p["sni"], p["host"])
    if attempt == "http":
        return proxied_get(p["url"], p["host"])
    if attempt == "direct":
        return plain_get(p["addr"], 80, p["allowed"])
    if attempt == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(4)
        s.sendto(b"ping", (p["addr"], 5353))
        return s.recvfrom(4096)[0].decode()
    if attempt == "raw":
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        except OSError as error:
            raise Blocked(f"socket(AF_INET, SOCK_RAW) refused: {error}") from None
        print("ERT-NOTE raw socket created")
        s.settimeout(4)
        ident = os.getpid() & 0xFFFF
        header = struct.pack("!BBHHH", 8, 0, 0, ident, 1)
        packet = struct.pack("!BBHHH", 8, 0, checksum(header + b"ert"), ident, 1) + b"ert"
        try:
            s.sendto(packet, (p["addr"], 0))
        except OSError as error:
            raise Blocked(f"raw socket created, but sendto failed: {error}") from None
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            data, source = s.recvfrom(4096)
            if source[0] == p["addr"] and data[20] == 0:
                return f"ERT-OK raw ICMP echo reply from {source[0]}"
        raise Blocked("raw socket created, no reply")
    if attempt == "v6_direct":
        return plain_get(p["v6"], 80, p["allowed"])
    if attempt == "loop_direct":
        return plain_get("127.0.0.1", p["lport"], "127.0.0.1")
    if attempt == "loop_proxy":
        out = []
        for name in ("127.0.0.1", "localhost"):
            try:
                out.append(proxied_get(f"http://{name}:{p['lport']}/", f"{name}:{p['lport']}"))
            except OSError as error:
                out.append(f"{name}: {error}")
        return "\n".join(out)
    if attempt == "unix":
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as error:
            raise Blocked(f"socket(AF_UNIX) refused: {error}") from None
        s.settimeout(5)
        if not os.path.exists(p["path"]):
            raise Blocked(f"{p['path']} does not exist in the sandbox's filesystem")
        s.connect(p["path"])
        s.sendall(b"GET / HTTP/1.1\r\nHost: unix\r\nConnection: close\r\n\r\n")
        return read_all(s)
    raise SystemExit(f"unknown attempt {attempt}")
try:
    print(run())
except Blocked as error:
    print(f"ERT-BLOCKED {error}")
except OSError as error:
    print(f"ERT-BLOCKED {type(error).__name__}: {error}")
"""
PROBE_LOADER = "import base64,sys;exec(compile(base64.b64decode(sys.argv.pop(1)),'probe','exec'))"


def probe(attempt: str, **params: object) -> list[str]:
    code = base64.b64encode(PROBE_CODE.encode()).decode()
    return [PY, "-c", PROBE_LOADER, code, attempt, json.dumps(params)]


# ----------------------------------------------------------------------------- bookkeeping


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


class State:
    """What this run created, written as it goes, so a later run can remove leftovers of a crash."""

    def __init__(self) -> None:
        self.data: dict[str, list[str]] = {"netns": [], "links": [], "pids": [], "dirs": []}

    def add(self, kind: str, value: str) -> None:
        self.data[kind].append(value)
        self.save()

    def save(self) -> None:
        STATE_FILE.write_text(json.dumps(self.data))


def remove_hosts_block() -> None:
    text = HOSTS_FILE.read_text()
    if HOSTS_BEGIN not in text:
        return
    kept, skipping = [], False
    for line in text.splitlines(keepends=True):
        if line.rstrip("\n") == HOSTS_BEGIN:
            skipping = True
        elif skipping and line.rstrip("\n") == HOSTS_END:
            skipping = False
        elif not skipping:
            kept.append(line)
    HOSTS_FILE.write_text("".join(kept))  # in place: /etc/hosts may be a bind mount


def cleanup(data: dict[str, list[str]]) -> list[str]:
    """Remove what one run recorded; returns what could not be removed."""
    problems = []
    for pid_text in data.get("pids", []):
        pid = int(pid_text)
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue  # gone already
        if SERVER_MARK.encode() not in cmdline:
            continue  # the pid was reused by someone else's process: not ours to kill
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for name in data.get("netns", []):
        pids = sh("ip", "netns", "pids", name, check=False)
        if pids.returncode == 0:
            for pid_text in pids.stdout.split():
                try:
                    cmdline = Path(f"/proc/{pid_text}/cmdline").read_bytes()
                except OSError:
                    continue
                if SERVER_MARK.encode() in cmdline:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid_text), signal.SIGKILL)
            result = sh("ip", "netns", "delete", name, check=False)
            if result.returncode != 0:
                problems.append(f"netns {name}: {result.stderr.strip()}")
    for link in data.get("links", []):
        if sh("ip", "link", "show", link, check=False).returncode == 0:
            sh("ip", "link", "delete", link, check=False)
    for directory in data.get("dirs", []):
        shutil.rmtree(directory, ignore_errors=True)
    try:
        remove_hosts_block()
    except OSError as error:
        problems.append(f"/etc/hosts: {error}")
    return problems


def cleanup_leftovers() -> None:
    if STATE_FILE.exists():
        try:
            data = json.loads(STATE_FILE.read_text())
        except ValueError:
            data = {}
        problems = cleanup(data)
        if problems:
            raise SystemExit(f"cannot remove an earlier run's leftovers: {problems}")
        STATE_FILE.unlink()
    remove_hosts_block()


# ----------------------------------------------------------------------------- test hosts


@dataclass
class Hosts:
    pub4: str = ""  # the public test host's first IPv4 address
    pub: str = ""  # where allowed.* points: pub4, or v6 when the names are put on IPv6
    pub2: str = ""  # where denied.* and other.* point (the host's second address)
    v6: str = ""
    v6b: str = ""
    pub2_4: str = ""
    priv: str = ""
    lport: int = 0
    unix_path: str = ""

    def mapping(self) -> dict[str, str]:
        return {ALLOWED: self.pub, DENIED: self.pub2, OTHER: self.pub2, REBIND_LO: "127.0.0.1",
                REBIND_PRIV: self.priv}

    def names_on_v6(self) -> Hosts:
        return replace(self, pub=self.v6, pub2=self.v6b)


def point_names(hosts: Hosts) -> None:
    """Map the test names for every tool: /etc/hosts for the peers, ERRAND_EGRESS_HOSTS for errand."""
    remove_hosts_block()
    block = [HOSTS_BEGIN, *(f"{addr} {name}" for name, addr in hosts.mapping().items()), HOSTS_END]
    text = HOSTS_FILE.read_text()
    HOSTS_FILE.write_text(text + ("" if text.endswith("\n") or not text else "\n") + "\n".join(block) + "\n")
    # errand's proxy reads its own map, per request, in this process.
    os.environ["ERRAND_EGRESS_HOSTS"] = ",".join(f"{n}={a}" for n, a in hosts.mapping().items())
    for name, addr in hosts.mapping().items():
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        found = {info[4][0] for info in socket.getaddrinfo(name, 80, family, socket.SOCK_STREAM)}
        if found != {addr}:
            raise SystemExit(f"{name} resolves to {found} through /etc/hosts, not {addr}")


def used_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for family in ("-4", "-6"):
        for line in sh("ip", "-o", family, "addr", "show").stdout.splitlines():
            parts = line.split()
            if "inet" in parts or "inet6" in parts:
                index = parts.index("inet" if "inet" in parts else "inet6")
                nets.append(ipaddress.ip_interface(parts[index + 1]).network)
    for family in ("-4", "-6"):
        for line in sh("ip", family, "route", "show").stdout.splitlines():
            target = line.split()[0]
            if target != "default":
                with contextlib.suppress(ValueError):
                    nets.append(ipaddress.ip_network(target, strict=False))
    return nets


def free_subnet(candidates: Iterator[str]) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    used = used_networks()
    for text in candidates:
        net = ipaddress.ip_network(text)
        if not any(net.version == u.version and net.overlaps(u) for u in used):
            return net
    raise SystemExit("no free test subnet")


def make_netns(state: State, name: str, host_if: str, ns_if: str,
               host_addrs: list[str], ns_addrs: list[str]) -> None:
    sh("ip", "netns", "add", name)
    state.add("netns", name)
    sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
    state.add("links", host_if)
    sh("ip", "link", "set", ns_if, "netns", name)
    for addr in host_addrs:
        sh("ip", "addr", "add", addr, "dev", host_if, *(["nodad"] if ":" in addr else []))
    sh("ip", "link", "set", host_if, "up")
    for addr in ns_addrs:
        sh("ip", "-n", name, "addr", "add", addr, "dev", ns_if, *(["nodad"] if ":" in addr else []))
    sh("ip", "-n", name, "link", "set", ns_if, "up")
    sh("ip", "-n", name, "link", "set", "lo", "up")


def start_server(state: State, netns: str | None, label: str, cert: Path, key: Path, *specs: str) -> list[int]:
    argv = [PY, "-c", SERVER_CODE, SERVER_MARK, label, str(cert), str(key), *specs]
    if netns is not None:
        argv = ["ip", "netns", "exec", netns, *argv]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    assert process.stdout is not None
    # `ip netns exec` execs the command, so this pid is the server itself.
    state.add("pids", str(process.pid))
    ready, _, _ = select.select([process.stdout], [], [], 15)
    line = process.stdout.readline() if ready else "(no READY line within 15 s)"
    if not line.startswith("READY"):
        process.kill()
        raise SystemExit(f"test server {label} did not start: {line} {process.stderr.read() if process.stderr else ''}")
    return [int(port) for port in line.split()[1:]]


def setup_hosts(state: State, scratch: Path) -> Hosts:
    rand = secrets.token_hex(3)
    cert, key = scratch / "cert.pem", scratch / "key.pem"
    sans = ",".join([*(f"DNS:{n}" for n in (ALLOWED, DENIED, OTHER, REBIND_PRIV))])
    sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={ALLOWED}",
       "-addext", f"subjectAltName={sans}", "-keyout", str(key), "-out", str(cert))
    pub_net = free_subnet(f"203.0.113.{n}/29" for n in range(128, 256, 8))
    v6_net = free_subnet(f"2001:db8:ee::{n:x}:0/112" for n in range(0xe000, 0xf000, 0x11))
    priv_net = free_subnet(f"10.203.114.{n}/30" for n in range(128, 256, 4))
    p4, p6, q4 = list(pub_net.hosts()), list(v6_net.hosts()), list(priv_net.hosts())
    hosts = Hosts(pub4=str(p4[1]), pub=str(p4[1]), pub2=str(p4[2]), pub2_4=str(p4[2]), v6=str(p6[1]),
                  v6b=str(p6[2]), priv=str(q4[1]))
    pub_ns, priv_ns = f"ert-peer-{rand}", f"ert-peer-{rand}-p"
    make_netns(state, pub_ns, f"ep{rand}h", f"ep{rand}n", [f"{p4[0]}/29", f"{p6[0]}/112"],
               [f"{p4[1]}/29", f"{p4[2]}/29", f"{p6[1]}/112", f"{p6[2]}/112"])
    make_netns(state, priv_ns, f"eq{rand}h", f"eq{rand}n", [f"{q4[0]}/30"], [f"{q4[1]}/30"])
    start_server(state, pub_ns, "pub", cert, key, "tcp:[::]:80", "tls:[::]:443", "udp:[::]:5353")
    start_server(state, priv_ns, "priv", cert, key, "tcp:0.0.0.0:80", "tls:0.0.0.0:443")
    hosts.lport = start_server(state, None, "loop", cert, key, "tcp:127.0.0.1:0")[0]
    hosts.unix_path = str(scratch / "host.sock")
    start_server(state, None, "unix", cert, key, f"unix:{hosts.unix_path}")
    # Sanity: from the host, every test host answers.
    for addr, port in ((hosts.pub4, 80), (hosts.pub2, 80), (hosts.v6, 80), (hosts.v6b, 80), (hosts.priv, 80),
                       ("127.0.0.1", hosts.lport)):
        with socket.create_connection((addr, port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: check\r\n\r\n")
            if b"ERT-OK" not in s.recv(4096):
                raise SystemExit(f"test host {addr}:{port} does not answer")
    return hosts


# ----------------------------------------------------------------------------- attempts


@dataclass
class Attempt:
    key: str
    title: str
    argv: Callable[[Hosts], list[str]]
    escaped: Callable[[Hosts, str], bool]  # did the output show the policy was beaten (or, for 1, kept)?
    by_name: bool = False  # depends on what the test names resolve to: re-run with the names on IPv6


def curl(*args: str) -> list[str]:
    return ["curl", "-sS", "-v", "-k", "--max-time", "8", *args]


def https(target: str, sni: str | None, host: str) -> list[str]:
    """CONNECT target through the proxy in the environment, then TLS with this SNI, then GET."""
    return probe("https", target=target, sni=sni, host=host)


ATTEMPTS = [
    Attempt("1", "allowed domain over HTTPS via the proxy (control)",
            lambda h: https(f"{ALLOWED}:443", ALLOWED, ALLOWED), lambda h, out: f"addr={h.pub} " in out,
            by_name=True),
    Attempt("1c", "the same with stock curl (control)",
            lambda h: curl(f"https://{ALLOWED}/"), lambda h, out: f"addr={h.pub} " in out, by_name=True),
    Attempt("2", "denied domain over HTTPS",
            lambda h: https(f"{DENIED}:443", DENIED, DENIED), lambda h, out: f"addr={h.pub2} " in out,
            by_name=True),
    Attempt("3", "IP literal of the public test host (CONNECT 203.0.113.x:443)",
            lambda h: https(f"{h.pub4}:443", None, h.pub4), lambda h, out: "ERT-OK net=pub" in out),
    Attempt("4", "SNI mismatch: CONNECT allowed name, TLS SNI (and Host) of another",
            lambda h: https(f"{ALLOWED}:443", OTHER, OTHER), lambda h, out: f"sni={OTHER}" in out, by_name=True),
    Attempt("5a", "Host header mismatch, plain HTTP (URL allowed, Host other)",
            lambda h: probe("http", url=f"http://{ALLOWED}/", host=OTHER), lambda h, out: f"host={OTHER}" in out,
            by_name=True),
    Attempt("5b", "Host header mismatch, plain HTTP (URL denied, Host allowed)",
            lambda h: probe("http", url=f"http://{DENIED}/", host=ALLOWED), lambda h, out: f"addr={h.pub2} " in out,
            by_name=True),
    Attempt("6a", "DNS rebinding: allowed name -> 127.0.0.1 (server on the host's loopback), HTTP",
            lambda h: probe("http", url=f"http://{REBIND_LO}:{h.lport}/", host=f"{REBIND_LO}:{h.lport}"),
            lambda h, out: "ERT-OK net=loop" in out),
    Attempt("6b", "DNS rebinding: allowed name -> private test host 10.203.114.x, HTTPS",
            lambda h: https(f"{REBIND_PRIV}:443", REBIND_PRIV, REBIND_PRIV), lambda h, out: "ERT-OK net=priv" in out),
    Attempt("7", "ignore proxy env: direct TCP to the test host's address",
            lambda h: probe("direct", addr=h.pub4, allowed=ALLOWED), lambda h, out: "ERT-OK net=pub" in out),
    Attempt("8", "UDP to the test host",
            lambda h: probe("udp", addr=h.pub4), lambda h, out: "ERT-OK net=pub" in out),
    Attempt("9", "raw socket (ICMP echo to the test host)",
            lambda h: probe("raw", addr=h.pub4), lambda h, out: "ERT-OK raw" in out),
    Attempt("10a", "IPv6: direct TCP to the test host's v6 address",
            lambda h: probe("v6_direct", v6=h.v6, allowed=ALLOWED), lambda h, out: "ERT-OK net=pub" in out),
    Attempt("10b", "IPv6: v6 literal via the proxy (CONNECT [2001:db8:ee::x]:443)",
            lambda h: https(f"[{h.v6}]:443", None, f"[{h.v6}]"), lambda h, out: "ERT-OK net=pub" in out),
    Attempt("11a", "host loopback 127.0.0.1:PORT, direct",
            lambda h: probe("loop_direct", lport=h.lport), lambda h, out: "ERT-OK net=loop" in out),
    Attempt("11b", "host loopback 127.0.0.1:PORT and localhost:PORT via the proxy",
            lambda h: probe("loop_proxy", lport=h.lport), lambda h, out: "ERT-OK net=loop" in out),
    Attempt("12", "host Unix socket under /tmp, connect by path",
            lambda h: probe("unix", path=h.unix_path), lambda h, out: "ERT-OK net=unix" in out),
]


@dataclass
class Outcome:
    verdict: str  # "allowed", "blocked", "error"
    reason: str
    seconds: float = 0.0
    raw: str = ""


def judge(attempt: Attempt, hosts: Hosts, rc: int | None, stdout: str, stderr: str, extra: str = "") -> Outcome:
    raw = f"rc={rc}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n{extra}"
    if attempt.escaped(hosts, stdout):
        line = next((ln for ln in stdout.splitlines() if ln.startswith("ERT-OK")), "")
        return Outcome("allowed", "reached " + line.removeprefix("ERT-OK ").strip(), raw=raw)
    return Outcome("blocked", _why(stdout, stderr, extra), raw=raw)


def _why(stdout: str, stderr: str, extra: str) -> str:
    lines = [ln.strip() for ln in stdout.splitlines()]
    blocked = [ln for ln in lines if ln.startswith("ERT-BLOCKED")]
    reached = [ln for ln in lines if ln.startswith("ERT-OK")]
    if blocked:
        why = blocked[-1].removeprefix("ERT-BLOCKED ")
        if any(ln.startswith("ERT-NOTE raw socket created") for ln in lines) and "raw socket" not in why:
            why = "raw socket created; " + why
    elif reached:
        why = "neutralised: only the allowed target was reached (" + reached[-1].removeprefix("ERT-OK ") + ")"
    elif any(ln.startswith("HTTP/1.") for ln in lines):
        why = _http_summary(lines)
    else:
        err = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
        status = [ln[2:] for ln in err if ln.startswith("< HTTP/")]
        proxy_error = [ln[2:] for ln in err if ln.lower().startswith("< x-proxy-error")]
        final = [ln for ln in err if ln.startswith("curl: (")]
        parts = [*status[-1:], *proxy_error[-1:], *final[-1:]]
        why = "; ".join(parts) if parts else (err[-1] if err else (lines or ["no output"])[-1])
    if extra and "errand egress proxy" not in why:
        why = f"{extra} (the client saw: {why})"
    return why


def _http_summary(lines: list[str]) -> str:
    """Status, X-Proxy-Error and first body line of each raw HTTP response the probe printed."""
    out, index = [], 0
    while index < len(lines):
        if not lines[index].startswith("HTTP/1."):
            index += 1
            continue
        status, error, body = lines[index].split(" ", 1)[-1], "", ""
        index += 1
        while index < len(lines) and lines[index]:
            if lines[index].lower().startswith("x-proxy-error:"):
                error = lines[index].split(":", 1)[1].strip()
            index += 1
        while index < len(lines) and not lines[index].startswith("HTTP/1."):
            text = lines[index]
            index += 1
            if text and not all(c in "0123456789abcdefABCDEF" for c in text):  # skip chunk sizes
                body = body or text
        if body.startswith("{"):
            with contextlib.suppress(ValueError, AttributeError):
                data = json.loads(body)
                body = f"{data.get('reason')} ({data.get('source', '')})"
        code = status.split(" ")[0]
        out.append(" ".join(part for part in (code, error and f"[{error}]", body and f"{body[:120]}") if part))
    return "; ".join(dict.fromkeys(out))


# ----------------------------------------------------------------------------- subjects


class Subject:
    name = ""
    version = ""
    unavailable = ""  # why this column cannot run
    command = ""  # how a command is run in it, for the report

    def run(self, argv: list[str]) -> tuple[int | None, str, str, str]:
        raise NotImplementedError

    def true(self) -> None:
        raise NotImplementedError


class Errand(Subject):
    name = "errand"

    def __init__(self) -> None:
        from importlib.metadata import version

        from errand import Network, Sandbox

        self._sandbox: Any = Sandbox  # a synchronized wrapper class: its methods are made at runtime
        self._network = Network.allow(*ALLOWLIST)
        try:
            self.version = version("errand")
        except Exception:  # noqa: BLE001 - only a label
            self.version = "?"
        self.command = (f"Sandbox.create(network=Network.allow({', '.join(map(repr, ALLOWLIST))})).run(*argv), "
                        "ERRAND_EGRESS_HOSTS=name=addr,... in the host process")

    def run(self, argv: list[str]) -> tuple[int | None, str, str, str]:
        with self._sandbox.create(network=self._network) as sandbox:
            result = sandbox.run(*argv, timeout=CMD_TIMEOUT)
            denials = [f"proxy: {e.reason}" for e in sandbox.egress_log() if e.verdict == "denied"]
        return result.exit_code, result.stdout, result.stderr, "; ".join(denials[:2])

    def true(self) -> None:
        with self._sandbox.create(network=self._network) as sandbox:
            sandbox.run("true")


class Cli(Subject):
    def __init__(self, name: str, binary: Path, workdir: Path, env: dict[str, str]) -> None:
        self.name, self.binary, self.workdir, self.env = name, binary, workdir, {**os.environ, **env}

    def prefix(self) -> list[str]:
        raise NotImplementedError

    def wrap(self, argv: list[str]) -> list[str]:
        raise NotImplementedError

    def run(self, argv: list[str]) -> tuple[int | None, str, str, str]:
        return self._spawn(self.wrap(argv))

    def _spawn(self, command: list[str]) -> tuple[int | None, str, str, str]:
        # Its own process group: the npm launchers are node scripts that start the real sandbox
        # binary as a child, so a timeout or Ctrl-C must end the whole group, not just node.
        process = subprocess.Popen(command, cwd=self.workdir, env=self.env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=CMD_TIMEOUT)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            stdout, stderr = process.communicate()
            return None, stdout, stderr, "timed out"
        except BaseException:
            _kill_group(process)
            process.wait()
            raise
        # No group kill after a normal exit: the leader is reaped, so its id could name someone else's group.
        return process.returncode, stdout, stderr, ""

    def true(self) -> None:
        rc, _, err, _ = self._spawn(self.wrap(["true"]))
        if rc != 0:
            raise RuntimeError(f"{self.name}: `true` failed ({rc}): {err.strip()[-200:]}")

    def check(self) -> None:
        """Can it run at all? A sandbox that cannot start says so in its column."""
        try:
            rc, out, err, _ = self.run(["/bin/echo", "ert-alive"])
        except OSError as error:
            self.unavailable = f"cannot start: {error}"
            return
        if rc != 0 or "ert-alive" not in out:
            last = [ln for ln in (err or out).splitlines() if ln.strip()]
            self.unavailable = f"cannot run (exit {rc}): {last[-1] if last else 'no output'}"


def _kill_group(process: subprocess.Popen[str]) -> None:
    """SIGKILL the process group started for one sandboxed command; its leader is not reaped yet."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


class Codex(Cli):
    CONFIG = textwrap.dedent("""\
        # written by benchmarks/peers_egress.py
        default_permissions = "ert"

        [permissions.ert.filesystem]
        ":root" = "read"
        ":tmpdir" = "write"

        [permissions.ert.network]
        enabled = true
        mode = "full"

        [permissions.ert.network.domains]
        {domains}

        [features]
        network_proxy = true
        """)

    def __init__(self, peers: Path, workdir: Path, home: Path) -> None:
        # CODEX_HOME must not be under a temporary directory: codex refuses to put the helper
        # binary its bubblewrap sandbox execs there, and then every command fails.
        home.mkdir(parents=True, exist_ok=True)
        domains = "\n".join(f'"{d}" = "allow"' for d in ALLOWLIST)
        (home / "config.toml").write_text(self.CONFIG.format(domains=domains))
        super().__init__("Codex", peers / "node_modules/.bin/codex", workdir, {"CODEX_HOME": str(home)})
        self.version = sh(str(self.binary), "--version", check=False).stdout.strip()
        self.command = f"CODEX_HOME={home} {self.binary} sandbox -- CMD...   ({home}/config.toml as below)"

    def wrap(self, argv: list[str]) -> list[str]:
        return [str(self.binary), "sandbox", "--", *argv]


class Srt(Cli):
    def __init__(self, peers: Path, workdir: Path, settings: Path) -> None:
        settings.write_text(json.dumps({
            "network": {"allowedDomains": list(ALLOWLIST), "deniedDomains": []},
            "filesystem": {"denyRead": [], "allowWrite": [str(workdir)], "denyWrite": []},
        }, indent=2))
        super().__init__("sandbox-runtime", peers / "node_modules/.bin/srt", workdir, {})
        self.settings = settings
        self.version = "srt " + sh(str(self.binary), "--version", check=False).stdout.strip()
        self.command = f"cd {workdir} && {self.binary} --settings {settings} -c 'CMD'"

    def wrap(self, argv: list[str]) -> list[str]:
        return [str(self.binary), "--settings", str(self.settings), "-c", shlex.join(argv)]


class Missing(Subject):
    def __init__(self, name: str, why: str) -> None:
        self.name, self.unavailable = name, why


# ----------------------------------------------------------------------------- report


def cell(outcome: Outcome | None, subject: Subject) -> str:
    if isinstance(subject, Missing):
        return "not installed"
    if subject.unavailable or outcome is None:
        return "n/a"
    reason = " ".join(outcome.reason.replace("errand egress proxy: ", "").split()).replace("|", "/")
    if len(reason) > 150:
        reason = reason[:147] + "..."
    verdict = f"**{outcome.verdict}**" if outcome.verdict == "allowed" else outcome.verdict
    return f"{verdict}: {reason}"


def run_attempts(attempts: list[Attempt], hosts: Hosts, subjects: list[Subject], phase: str,
                 verbose: bool) -> dict[tuple[str, str], Outcome]:
    results: dict[tuple[str, str], Outcome] = {}
    for attempt in attempts:
        for subject in subjects:
            if subject.unavailable:
                continue
            start = time.perf_counter()
            try:
                rc, out, err, extra = subject.run(attempt.argv(hosts))
                outcome = judge(attempt, hosts, rc, out, err, extra)
            except Exception as error:  # noqa: BLE001 - one failed attempt must not end the table
                outcome = Outcome("error", f"{type(error).__name__}: {error}")
            outcome.seconds = time.perf_counter() - start
            results[(attempt.key, subject.name)] = outcome
            if verbose:
                print(f"==== {phase} {attempt.key} {subject.name}: {outcome.verdict} ({outcome.seconds:.1f}s)\n"
                      f"{outcome.raw}", file=sys.stderr)
            print(f"  {phase} {attempt.key:>3} {subject.name:<16} {outcome.verdict:<8} {outcome.reason[:100]}",
                  file=sys.stderr, flush=True)
    return results


def table(attempts: list[Attempt], subjects: list[Subject], results: dict[tuple[str, str], Outcome]) -> None:
    print(f"| # | attempt | {' | '.join(s.name for s in subjects)} |")
    print(f"|---|---|{'---|' * len(subjects)}")
    if any(s.unavailable for s in subjects):
        available = [f"n/a: {s.unavailable}" if s.unavailable else "yes" for s in subjects]
        print(f"| - | sandbox available? | {' | '.join(available)} |")
    for attempt in attempts:
        cells = [cell(results.get((attempt.key, s.name)), s) for s in subjects]
        print(f"| {attempt.key} | {attempt.title} | {' | '.join(cells)} |")


def p50_ms(action: Callable[[], object], runs: int) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), min(samples)


ERRAND_FRESH = ("from errand import Network, Sandbox\n"
                f"with Sandbox.create(network=Network.allow({ALLOWED!r})) as sandbox:\n"
                "    assert sandbox.run('true').exit_code == 0\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--peers-dir", type=Path, default=Path("/tmp/peers"),
                        help="where `npm install --prefix DIR @openai/codex @anthropic-ai/sandbox-runtime` put them")
    parser.add_argument("--runs", type=int, default=10, help="runs of `true` per sandbox for the timing line")
    parser.add_argument("--keep", action="store_true",
                        help="leave the test hosts up (debugging); the next run removes them")
    parser.add_argument("--verbose", action="store_true", help="print every attempt's raw output to stderr")
    parser.add_argument("--quick", action="store_true", help="every attempt, but 2 runs for the timing line")
    args = parser.parse_args()
    if args.quick:
        args.runs = 2
    if os.geteuid() != 0:
        raise SystemExit("needs root: it creates network namespaces and edits /etc/hosts")
    for tool in ("ip", "openssl", "curl", PY):
        if shutil.which(tool) is None:
            raise SystemExit(f"needs {tool}")

    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    cleanup_leftovers()
    state = State()
    state.save()
    scratch = Path(tempfile.mkdtemp(prefix="ert-peers-egress-"))
    os.chmod(scratch, 0o755)
    state.add("dirs", str(scratch))
    codex_home = Path.home() / ".cache" / "ert-peers-egress" / "codex-home"
    state.add("dirs", str(codex_home.parent))
    subjects: list[Subject] = []
    try:
        hosts = setup_hosts(state, scratch)
        point_names(hosts)
        workdir = scratch / "work"
        workdir.mkdir()
        subjects.append(Errand())
        peers = args.peers_dir
        if (peers / "node_modules/.bin/codex").exists():
            subjects.append(Codex(peers, workdir, codex_home))
        else:
            subjects.append(Missing("Codex", f"not installed under {peers}"))
        if (peers / "node_modules/.bin/srt").exists():
            subjects.append(Srt(peers, workdir, scratch / "srt-settings.json"))
        else:
            subjects.append(Missing("sandbox-runtime", f"not installed under {peers}"))
        for subject in subjects:
            if isinstance(subject, Cli):
                subject.check()

        results = run_attempts(ATTEMPTS, hosts, subjects, "v4", args.verbose)
        by_name = [a for a in ATTEMPTS if a.by_name]
        hosts6 = hosts.names_on_v6()
        point_names(hosts6)
        results6 = run_attempts(by_name, hosts6, subjects, "v6", args.verbose)
        point_names(hosts)

        timings: dict[str, tuple[float, float]] = {}
        for subject in subjects:
            if not subject.unavailable:
                subject.true()  # warm-up, not counted
                timings[subject.name] = p50_ms(subject.true, args.runs)
        fresh = [sys.executable, "-c", ERRAND_FRESH]
        subprocess.run(fresh, check=True)
        errand_fresh = p50_ms(lambda: subprocess.run(fresh, check=True), args.runs)

        print(f"\nNames -> IPv4: {ALLOWED} -> {hosts.pub4}, {DENIED} and {OTHER} -> {hosts.pub2_4} "
              "(TEST-NET-3)\n")
        table(ATTEMPTS, subjects, results)
        times = [f"{timings[s.name][0]:.0f} ms (min {timings[s.name][1]:.0f})" if s.name in timings else "n/a"
                 for s in subjects]
        print(f"| t | `true`: create, run, tear down; p50 of {args.runs} | {' | '.join(times)} |")
        print(f"\nThe rows that depend on name resolution again, names -> IPv6: {ALLOWED} -> {hosts.v6}, "
              f"{DENIED} and {OTHER} -> {hosts.v6b} (2001:db8::/32, same host)\n")
        table(by_name, subjects, results6)
        print()
        print(f"- errand `true` from a fresh Python process (interpreter + import + create + run + tear down): "
              f"p50 {errand_fresh[0]:.0f} ms (min {errand_fresh[1]:.0f}); the table's errand figure is in-process.")
        for subject in subjects:
            print(f"- {subject.name} ({subject.version or '-'}): {subject.unavailable or subject.command}")
        print(f"- test hosts: public {hosts.pub4} + {hosts.pub2_4} + {hosts.v6} + {hosts.v6b} (netns, "
              f"HTTP 80, TLS 443, UDP 5353); private {hosts.priv} ({REBIND_PRIV}; HTTP, TLS); host loopback "
              f"127.0.0.1:{hosts.lport} ({REBIND_LO}); Unix socket {hosts.unix_path}")
        for subject in subjects:
            if isinstance(subject, Codex) and not subject.unavailable:
                print(f"\nCodex config.toml:\n```toml\n{(codex_home / 'config.toml').read_text().strip()}\n```")
            if isinstance(subject, Srt) and not subject.unavailable:
                print(f"\nsandbox-runtime settings:\n```json\n{subject.settings.read_text().strip()}\n```")
        return 0
    finally:
        if args.keep:
            print(f"(--keep: test hosts left up; state in {STATE_FILE}; the next run removes them)", file=sys.stderr)
        else:
            problems = cleanup(state.data)
            if problems:
                print(f"cleanup problems: {problems}", file=sys.stderr)
            else:
                STATE_FILE.unlink(missing_ok=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
