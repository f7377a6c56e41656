"""The host-side egress proxy: the only way out of a sandbox's network namespace.

Each sandbox gets its own listening socket *inside its own network namespace*
(127.0.0.1:3128 there), created by the launcher and handed to this process;
no other sandbox can reach it. Programs find it through the usual proxy
variables; programs that ignore them find no route at all.

For every request the proxy decides on the *name* first (a denied name causes
no DNS query), resolves it here on the host, refuses loopback, private,
link-local, CGNAT and metadata addresses unless a CIDR allows them, and
connects to the address it resolved itself. A CONNECT tunnel must then carry a
TLS ClientHello whose SNI is the CONNECT host (no domain fronting); a plain
HTTP request's Host header must name the host it targets.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from errand.sandbox._tls import TLS_RECORD_HEADER, client_hello_length, server_name
from errand.sandbox.network import Address, Decision, Network, decide_address, decide_name

__all__ = ["PROXY_PORT", "EgressEvent", "EgressProxy", "proxy_env"]

PROXY_PORT = 3128
_HEAD_LIMIT = 65536
_HEAD_TIMEOUT = 30.0
_CONNECT_TIMEOUT = 10.0
_LOG_LIMIT = 1 << 20  # bytes of egress log kept per sandbox


def proxy_env() -> dict[str, str]:
    """What programs inside the sandbox need to find the proxy."""
    url = f"http://127.0.0.1:{PROXY_PORT}"
    env = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "PIP_PROXY", "npm_config_proxy",
                 "npm_config_https_proxy"):
        env[name] = url
        env[name.lower()] = url
    env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1,::1"
    return env


@dataclass(frozen=True)
class EgressEvent:
    time: float
    host: str
    port: int
    verdict: str  # "allowed" or "denied"
    reason: str
    bytes_out: int = 0
    bytes_in: int = 0
    address: str = ""


class _Refused(Exception):
    def __init__(self, reason: str, status: int = 403) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


Resolver = Callable[[str, int], "asyncio.Future[list[str]] | object"]


class EgressProxy:
    """Serves every sandbox of this process. Policies can be swapped at runtime."""

    def __init__(self) -> None:
        self._policies: dict[str, Network] = {}
        self._servers: dict[str, asyncio.base_events.Server] = {}
        self._live: dict[str, set[_Tunnel]] = {}
        self._logs: dict[str, Path] = {}
        self._listeners: dict[str, list[asyncio.Queue[EgressEvent | None]]] = {}

    async def serve(self, sandbox_id: str, listener: socket.socket, policy: Network, log_path: Path) -> None:
        self._policies[sandbox_id] = policy
        self._live[sandbox_id] = set()
        self._logs[sandbox_id] = log_path
        listener.setblocking(False)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._handle(sandbox_id, reader, writer)

        self._servers[sandbox_id] = await asyncio.start_server(handle, sock=listener)

    def set_policy(self, sandbox_id: str, policy: Network) -> int:
        """Swap the policy; close live connections it forbids. Returns how many were closed."""
        self._policies[sandbox_id] = policy
        closed = 0
        for tunnel in list(self._live.get(sandbox_id, ())):
            if not tunnel.still_allowed(policy):
                tunnel.abort()
                closed += 1
                self._record(sandbox_id, EgressEvent(time.time(), tunnel.host, tunnel.port, "denied",
                                                     "closed: the new policy forbids it"))
        return closed

    async def stop(self, sandbox_id: str) -> None:
        server = self._servers.pop(sandbox_id, None)
        if server is not None:
            server.close()
        for tunnel in self._live.pop(sandbox_id, set()):
            tunnel.abort()
        self._policies.pop(sandbox_id, None)
        self._logs.pop(sandbox_id, None)
        for queue in self._listeners.pop(sandbox_id, []):
            queue.put_nowait(None)

    def subscribe(self, sandbox_id: str) -> asyncio.Queue[EgressEvent | None]:
        queue: asyncio.Queue[EgressEvent | None] = asyncio.Queue()
        self._listeners.setdefault(sandbox_id, []).append(queue)
        return queue

    # ---------------------------------------------------------------- requests

    async def _handle(self, sandbox_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _no_delay(writer)
        host, port = "?", 0
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT)
            method, target, headers = _parse_head(head)
            if method == "CONNECT":
                host, port = _split_host_port(target, 443)
                await self._tunnel(sandbox_id, host, port, reader, writer)
            else:
                host, port, request = _origin_request(method, target, headers, head)
                await self._forward(sandbox_id, host, port, request, reader, writer)
        except _Refused as refusal:
            self._record(sandbox_id, EgressEvent(time.time(), host, port, "denied", refusal.reason))
            await _reply(writer, refusal.status, refusal.reason)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError, ValueError):
            await _reply(writer, 400, "bad proxy request")
        finally:
            writer.close()

    async def _open(self, sandbox_id: str, host: str, port: int) -> tuple[asyncio.StreamReader,
                                                                          asyncio.StreamWriter, str]:
        policy = self._policies[sandbox_id]
        decision = decide_name(policy, host)
        if not decision.allowed:
            raise _Refused(decision.reason)
        addresses = await _resolve(host, port)
        if not addresses:
            raise _Refused(f"cannot resolve {host}", 502)
        verdicts = [(address, decide_address(policy, address)) for address in addresses]
        usable = [address for address, verdict in verdicts if verdict.allowed]
        if not usable:
            raise _Refused(verdicts[0][1].reason)
        last_error: Exception | None = None
        for address in usable:
            try:
                upstream_reader, upstream_writer = await asyncio.wait_for(
                    asyncio.open_connection(str(address), port), _CONNECT_TIMEOUT)
            except (OSError, TimeoutError) as error:
                last_error = error
                continue
            _no_delay(upstream_writer)
            return upstream_reader, upstream_writer, str(address)
        raise _Refused(f"cannot connect to {host}:{port} ({last_error})", 502)

    async def _tunnel(self, sandbox_id: str, host: str, port: int, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer, address = await self._open(sandbox_id, host, port)
        try:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            first = await _client_hello(reader)
            if first is not None:
                if (sni := server_name(first)) is not None and sni != host.lower().rstrip("."):
                    raise _Refused(f"TLS server name {sni!r} does not match CONNECT host {host!r}")
                if sni is None and _literal(host) is None:
                    raise _Refused("TLS ClientHello without a server name")
                upstream_writer.write(first)
        except BaseException:
            upstream_writer.close()
            raise
        await self._splice(sandbox_id, host, port, address, reader, writer, upstream_reader, upstream_writer,
                           sent=len(first or b""))

    async def _forward(self, sandbox_id: str, host: str, port: int, request: bytes, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer, address = await self._open(sandbox_id, host, port)
        upstream_writer.write(request)
        await self._splice(sandbox_id, host, port, address, reader, writer, upstream_reader, upstream_writer,
                           sent=len(request))

    async def _splice(self, sandbox_id: str, host: str, port: int, address: str, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, upstream_reader: asyncio.StreamReader,
                      upstream_writer: asyncio.StreamWriter, sent: int) -> None:
        tunnel = _Tunnel(host, port, writer, upstream_writer)
        live = self._live.get(sandbox_id)
        if live is None:
            upstream_writer.close()
            return
        live.add(tunnel)
        counts = [sent, 0]
        try:
            await asyncio.gather(_pump(reader, upstream_writer, counts, 0),
                                 _pump(upstream_reader, writer, counts, 1))
        finally:
            live.discard(tunnel)
            upstream_writer.close()
            self._record(sandbox_id, EgressEvent(time.time(), host, port, "allowed",
                                                 "allowed by policy", counts[0], counts[1], address))

    # ------------------------------------------------------------------- log

    def _record(self, sandbox_id: str, event: EgressEvent) -> None:
        for queue in self._listeners.get(sandbox_id, []):
            queue.put_nowait(event)
        path = self._logs.get(sandbox_id)
        if path is None:
            return
        try:
            with open(path, "a") as handle:
                handle.write(json.dumps(asdict(event)) + "\n")
                size = handle.tell()
            if size > _LOG_LIMIT:
                _trim(path)
        except OSError:
            pass  # the sandbox's directory is gone: it has ended


class _Tunnel:
    def __init__(self, host: str, port: int, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.host, self.port = host, port
        self._client, self._upstream = client, upstream

    def still_allowed(self, policy: Network) -> bool:
        return decide_name(policy, self.host).allowed

    def abort(self) -> None:
        for writer in (self._client, self._upstream):
            transport = writer.transport
            if not transport.is_closing():
                transport.abort()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, counts: list[int], index: int) -> None:
    try:
        while chunk := await source.read(65536):
            counts[index] += len(chunk)
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (ConnectionError, OSError):
        sink.transport.abort()


async def _client_hello(reader: asyncio.StreamReader) -> bytes | None:
    """The first TLS record the client sends, or None if it does not speak TLS first."""
    try:
        header = await asyncio.wait_for(reader.readexactly(TLS_RECORD_HEADER), _HEAD_TIMEOUT)
    except asyncio.IncompleteReadError as partial:
        return partial.partial or None
    length = client_hello_length(header)
    if length is None:
        raise _Refused("the tunnel must start with a TLS ClientHello")
    return header + await asyncio.wait_for(reader.readexactly(length - TLS_RECORD_HEADER), _HEAD_TIMEOUT)


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return method.upper(), target, headers


def _split_host_port(target: str, default_port: int) -> tuple[str, int]:
    if target.startswith("["):
        host, _, rest = target[1:].partition("]")
        port = int(rest[1:]) if rest.startswith(":") else default_port
    elif target.count(":") == 1:
        host, port_text = target.split(":")
        port = int(port_text)
    else:
        host, port = target, default_port
    if not host or not 0 < port < 65536:
        raise ValueError(target)
    return host.lower().rstrip("."), port


def _origin_request(method: str, target: str, headers: dict[str, str], head: bytes) -> tuple[str, int, bytes]:
    """Turn an absolute-form proxy request into an origin-form request for one host."""
    if not target.lower().startswith("http://"):
        raise _Refused("only http:// URLs can be proxied without CONNECT", 400)
    authority, _, path = target[7:].partition("/")
    host, port = _split_host_port(authority.rsplit("@", 1)[-1], 80)
    host_header = headers.get("host")
    if host_header is not None and _split_host_port(host_header, port) != (host, port):
        raise _Refused(f"Host header {host_header!r} does not match the request's host {host!r}")
    lines = head.decode("latin-1").split("\r\n")
    kept = [line for line in lines[1:] if line and line.split(":", 1)[0].strip().lower() not in
            ("proxy-connection", "proxy-authorization", "connection", "keep-alive")]
    if host_header is None:
        kept.append(f"Host: {authority}")
    # One request per connection: a later request on a kept-alive connection
    # could name another host without passing through these checks.
    request = "\r\n".join([f"{method} /{path} HTTP/1.1", *kept, "Connection: close", "", ""])
    return host, port, request.encode("latin-1")


async def _resolve(host: str, port: int) -> list[Address]:
    literal = _literal(host)
    if literal is not None:
        return [literal]
    override = _overrides().get(host)
    if override is not None:
        return override
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return []
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))


def _overrides() -> dict[str, list[Address]]:
    """``ERRAND_EGRESS_HOSTS="name=addr,name=addr"``: the proxy's own hosts file (test hosts)."""
    mapping: dict[str, list[Address]] = {}
    for item in filter(None, os.environ.get("ERRAND_EGRESS_HOSTS", "").split(",")):
        name, _, address = item.partition("=")
        mapping.setdefault(name.strip().lower(), []).append(ipaddress.ip_address(address.strip()))
    return mapping


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _no_delay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def _reply(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    if writer.transport.is_closing():
        return
    body = f"errand egress proxy: {reason}\n".encode()
    phrase = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}.get(status, "Error")
    writer.write(f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                 f"Connection: close\r\n\r\n".encode() + body)
    try:
        await writer.drain()
    except ConnectionError:
        pass


def _trim(path: Path) -> None:
    data = path.read_bytes()
    keep = data[len(data) // 2:]
    keep = keep[keep.find(b"\n") + 1:]
    partial = path.with_suffix(".trim")
    partial.write_bytes(keep)
    os.replace(partial, path)


_unused = Decision
