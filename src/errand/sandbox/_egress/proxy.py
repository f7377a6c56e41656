"""The host-side egress proxy: the only way out of a sandbox's network namespace.

Each sandbox gets its own listening socket *inside its own network namespace*
(127.0.0.1:3128 there), created by the launcher and handed to this process;
no other sandbox can reach it. Programs find it through the usual proxy
variables; programs that ignore them find no route at all.

For every request the proxy decides on the *name* first (a denied name causes
no DNS query), resolves it here on the host, refuses loopback, private,
link-local, CGNAT and metadata addresses unless a CIDR allows them, and
connects to the address it resolved itself. Ports are part of the decision.

A CONNECT tunnel must carry TLS: its first record must be a ClientHello whose
SNI is the CONNECT host, and not one byte reaches the server before that is
checked. What follows is opaque, except to a host the sandbox declared a
secret for (``errand.sandbox.secret``): that tunnel's TLS ends here, under a
certificate of the sandbox's own CA; each request is read (a Host header other
than the server name is domain fronting, and refused), the secret's
placeholder replaced by its value, and TLS re-originated to the host, verified.

A plain-HTTP connection is parsed request by request (``http``: framing is
followed exactly, and ambiguous framing refused), so every request is checked:
its URL names the host and port, its Host header must agree, and the request
goes to an upstream opened for that host and port; a request for another host
ends the upstream connection and opens (or is refused) one of its own.

Slow is not bad: on a saturated machine a client can take tens of seconds to
send a head its program wrote long ago (its own event loop busy unpacking
what it fetched), so the proxy waits for a head, a ClientHello and an upstream
connection within generous bounds (:class:`ProxyTimeouts`, set by
``ERRAND_EGRESS_*_TIMEOUT``). Every connection the proxy does not carry, for
whatever cause (a policy's denial, a malformed or unfinished head, a timeout,
a client that left), is an egress event with its reason.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import ipaddress
import json
import math
import os
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from errand.errors import ConfigError
from errand.sandbox._backends.spec import PROXY_PORT
from errand.sandbox._egress.http import Refused, RequestHead, parse_request, split_host_port
from errand.sandbox._egress.intercept import Interceptor, upstream_context
from errand.sandbox._egress.ledger import UNANSWERED, EgressEvent, EgressLedger, read_ledger
from errand.sandbox._egress.plainhttp import Upstream, absolute_target, exchange, next_head, origin_head, read_head
from errand.sandbox._egress.tls import TLS_RECORD_HEADER, UnreadableHello, client_hello_length, server_name
from errand.sandbox.network import (
    Address,
    Decision,
    Network,
    Scheme,
    cidr_allows,
    decide_address,
    decide_name,
    parse_address,
)

__all__ = ["EgressEvent", "EgressProxy", "ProxyTimeouts", "proxy_env"]

_HEAD_LIMIT = 65536
# What a client is told when the host it may reach does not answer (refused, unreachable, timed
# out): 503, as squid and envoy say it, not 502. An outage is then retried as the client retries
# one it meets directly: pip retries 503 and not 502, so a registry down for a moment behind this
# proxy failed an install at once that pip, going direct, would have waited out.
UNAVAILABLE = 503
_MAX_CONNECTIONS = 512  # per sandbox
# Name lookups run on threads of their own, never the event loop's default executor: a resolver that
# does not answer holds a lookup's thread for its whole timeout (10 s with glibc's defaults), and
# sandboxes asking many names at once would otherwise take every thread the worker's store calls and
# file work wait on. A sandbox has at most LOOKUPS_PER_SANDBOX under way; the others' go on, while
# LOOKUP_THREADS holds every sandbox's share: 64 sandboxes, where a task alone runs up to eight at once
# (one an attempt, the same agent on the same prompt) and a worker several tasks. With sixteen, four
# sandboxes asking a silent resolver took every thread. A thread is made only when a lookup finds
# none idle, and one waiting on the resolver costs about 28 KB.
LOOKUP_THREADS = 256
LOOKUPS_PER_SANDBOX = 4
_LOG_LIMIT = 1 << 20  # bytes of egress log appended per sandbox before it is rewritten as a checkpoint
LIVE_BACKLOG = 1000  # events a subscriber that is not reading may fall behind before they are dropped


async def receive_listeners(channel: socket.socket, count: int, timeout: float = 30.0) -> list[socket.socket]:
    """The ``count`` listeners the launcher sends over ``channel`` in one message: the proxy's,
    then the gateway's if it has one (none if it died first)."""
    loop = asyncio.get_running_loop()
    channel.setblocking(False)
    received: asyncio.Future[list[int]] = loop.create_future()

    def ready() -> None:
        try:
            _data, fds, _flags, _address = socket.recv_fds(channel, 1, count)
        except BlockingIOError:
            return
        if not received.done():
            received.set_result(fds)

    loop.add_reader(channel.fileno(), ready)
    try:
        fds = await asyncio.wait_for(received, timeout)
    finally:
        loop.remove_reader(channel.fileno())
        channel.close()
    return [socket.socket(fileno=fd) for fd in fds]


def _proxy_env() -> dict[str, str]:
    url = f"http://127.0.0.1:{PROXY_PORT}"
    env = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "PIP_PROXY", "npm_config_proxy",
                 "npm_config_https_proxy"):
        env[name] = url
        env[name.lower()] = url
    env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1,::1"
    return env


_PROXY_ENV = _proxy_env()


def proxy_env() -> dict[str, str]:
    """What programs inside the sandbox need to find the proxy (a fresh copy; built once)."""
    return dict(_PROXY_ENV)


@dataclass(frozen=True)
class ProxyTimeouts:
    """How long the proxy waits, in seconds: for a request head (or a tunnel's TLS ClientHello)
    to arrive whole, for a kept-alive connection's next request to begin, for an upstream
    connection to open.

    Generous by default: at load 17-41 on two cores a CONNECT head took over 10 s to
    arrive, and a proxy that answered it 400 failed installs that would have worked
    (npm reports it as the registry's ``E400``). A bound still ends a client that
    never finishes, so a stuck connection does not hold a descriptor for ever.
    """

    head: float = 120.0
    idle: float = 60.0
    connect: float = 30.0

    def __post_init__(self) -> None:
        for name in ("head", "idle", "connect"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                    or value <= 0:
                raise ConfigError(f"the egress proxy's {name} timeout must be a positive number of seconds, "
                                  f"not {value!r}", code="invalid_config")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProxyTimeouts:
        """The defaults, each overridden by ``ERRAND_EGRESS_HEAD_TIMEOUT``, ``..._IDLE_TIMEOUT``
        or ``..._CONNECT_TIMEOUT`` (seconds) where set."""
        environ = os.environ if environ is None else environ
        given: dict[str, float] = {}
        for name in ("head", "idle", "connect"):
            variable = f"ERRAND_EGRESS_{name.upper()}_TIMEOUT"
            text = environ.get(variable, "").strip()
            if not text:
                continue
            try:
                given[name] = float(text)
            except ValueError:
                raise ConfigError(f"${variable} must be a number of seconds, not {text!r}",
                                  code="invalid_config") from None
        return cls(**given)


class _Connection:
    """One client connection, tracked from accept, so a policy change reaches it at any stage."""

    def __init__(self, client: asyncio.WriteTransport) -> None:
        self.client = client
        self.upstream: asyncio.WriteTransport | None = None
        self.host, self.port, self.address = "?", 0, ""
        self.scheme: Scheme = "https"
        self.answered = False  # a CONNECT was answered 200, or a response begun: no HTTP error can follow
        self.ended_by_policy = False  # closed by a policy change, which logged it

    def allowed_under(self, policy: Network) -> bool:
        if self.host != "?" and not decide_name(policy, self.host, self.port, self.scheme).allowed:
            return False
        address = self.address and ipaddress.ip_address(self.address)
        return not address or _check_address(policy, address, self.port, self.scheme).allowed

    def abort(self) -> None:
        for transport in (self.client, self.upstream):
            if transport is not None and not transport.is_closing():
                transport.abort()


class EgressProxy:
    """Serves every sandbox of this process. Policies can be swapped at runtime."""

    def __init__(self, timeouts: ProxyTimeouts | None = None) -> None:
        self.timeouts = timeouts if timeouts is not None else ProxyTimeouts.from_env()
        self._policies: dict[str, Network] = {}
        self._interceptors: dict[str, Interceptor] = {}
        self._lookups: dict[str, asyncio.Semaphore] = {}
        self._servers: dict[str, asyncio.base_events.Server] = {}
        self._live: dict[str, set[_Connection]] = {}
        self._logs: dict[str, Path] = {}
        self._log_files: dict[str, TextIO] = {}
        self._ledgers: dict[str, EgressLedger] = {}
        self._checkpoint_sizes: dict[str, int] = {}
        self._listeners: dict[str, list[asyncio.Queue[EgressEvent | None]]] = {}
        self._dropped: dict[asyncio.Queue[EgressEvent | None], int] = {}

    async def serve(self, sandbox_id: str, listener: socket.socket, policy: Network, log_path: Path,
                    interceptor: Interceptor | None = None) -> None:
        """Serve a sandbox's listener under ``policy``; with ``interceptor``, its declared secrets
        are swapped in for their hosts."""
        self._policies[sandbox_id] = policy
        if interceptor is not None:
            self._interceptors[sandbox_id] = interceptor
        self._lookups[sandbox_id] = asyncio.Semaphore(LOOKUPS_PER_SANDBOX)
        self._live[sandbox_id] = set()
        self._logs[sandbox_id] = log_path
        self._ledgers[sandbox_id] = _ledger_of(log_path)
        listener.setblocking(False)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._handle(sandbox_id, reader, writer)

        self._servers[sandbox_id] = await asyncio.start_server(handle, sock=listener, limit=_HEAD_LIMIT)

    def set_policy(self, sandbox_id: str, policy: Network) -> int:
        """Swap the policy; close live connections it forbids. Returns how many were closed."""
        self._policies[sandbox_id] = policy
        closed = 0
        for connection in list(self._live.get(sandbox_id, ())):
            if not connection.allowed_under(policy):
                connection.ended_by_policy = True
                connection.abort()
                closed += 1
                self._record(sandbox_id, EgressEvent(time.time(), connection.host, connection.port, "denied",
                                                     "closed: the new policy forbids it"))
        return closed

    async def stop(self, sandbox_id: str) -> None:
        server = self._servers.pop(sandbox_id, None)
        if server is not None:
            server.close()
        for connection in self._live.pop(sandbox_id, set()):
            connection.abort()
        self._policies.pop(sandbox_id, None)
        self._interceptors.pop(sandbox_id, None)
        self._lookups.pop(sandbox_id, None)
        self._logs.pop(sandbox_id, None)
        self._ledgers.pop(sandbox_id, None)
        self._checkpoint_sizes.pop(sandbox_id, None)
        handle = self._log_files.pop(sandbox_id, None)
        if handle is not None:
            handle.close()
        for queue in self._listeners.pop(sandbox_id, []):
            self._say_dropped(queue)
            queue.put_nowait(None)  # room is kept for it: see subscribe
            self._dropped.pop(queue, None)

    def subscribe(self, sandbox_id: str) -> asyncio.Queue[EgressEvent | None]:
        """A queue of the sandbox's events as they happen, ending with None when it stops. A
        subscriber that falls :data:`LIVE_BACKLOG` events behind misses the next ones, and
        is told how many by a ``dropped`` event when it has caught up (or at the end)."""
        # Room beyond the backlog for the "dropped" marker and the end, so neither is ever lost.
        queue: asyncio.Queue[EgressEvent | None] = asyncio.Queue(maxsize=LIVE_BACKLOG + 2)
        if sandbox_id in self._servers:
            self._listeners.setdefault(sandbox_id, []).append(queue)
        else:
            queue.put_nowait(None)  # already stopped: the stream is over
        return queue

    def unsubscribe(self, sandbox_id: str, queue: asyncio.Queue[EgressEvent | None]) -> None:
        queues = self._listeners.get(sandbox_id, [])
        if queue in queues:
            queues.remove(queue)
        self._dropped.pop(queue, None)

    # ---------------------------------------------------------------- requests

    async def _handle(self, sandbox_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        live = self._live.get(sandbox_id)
        if live is None or len(live) >= _MAX_CONNECTIONS:
            # One sandbox must not exhaust the descriptors every other sandbox here needs.
            reason = "the sandbox has ended" if live is None else \
                f"too many connections at once ({_MAX_CONNECTIONS} open from this sandbox)"
            self._record(sandbox_id, EgressEvent(time.time(), "?", 0, "denied", reason))
            writer.transport.abort()
            return
        _no_delay(writer.get_extra_info("socket"))
        connection = _Connection(writer.transport)
        live.add(connection)
        try:
            await self._serve_client(sandbox_id, connection, reader, writer)
        except Refused as refusal:
            await self._refuse(sandbox_id, connection, writer, refusal)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, TimeoutError, ValueError,
                UnicodeError, ssl.SSLError) as error:
            await self._refuse(sandbox_id, connection, writer, _refusal(error))
        finally:
            live.discard(connection)
            connection.abort()

    async def _serve_client(self, sandbox_id: str, connection: _Connection, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> None:
        head = await read_head(reader, self.timeouts.head, "the request head")
        request = parse_request(head)
        if request.method == "CONNECT":
            try:
                connection.host, connection.port = split_host_port(request.target, 443)
            except ValueError:
                raise Refused(f"a malformed CONNECT target {request.target[:80]!r}", 400) from None
            await self._tunnel(sandbox_id, connection, reader, writer)
        else:
            await self._serve_http(sandbox_id, connection, request, reader, writer)

    async def _refuse(self, sandbox_id: str, connection: _Connection, writer: asyncio.StreamWriter,
                      refusal: Refused) -> None:
        """A connection not carried (on, or any more): logged with its reason, and answered
        with it while no response has begun."""
        if connection.ended_by_policy:
            return  # what follows its abort is no news: the policy change was logged
        interceptor = self._interceptors.get(sandbox_id)
        reason = refusal.reason if interceptor is None else interceptor.redact(refusal.reason)
        self._record(sandbox_id, EgressEvent(time.time(), connection.host, connection.port, "denied",
                                             reason, address=connection.address))
        if not connection.answered:
            await _reply(writer, refusal.status, reason)

    def _check_name(self, sandbox_id: str, connection: _Connection) -> Network:
        policy = self._policies.get(sandbox_id)
        if policy is None:
            raise Refused("the sandbox has ended")
        decision = decide_name(policy, connection.host, connection.port, connection.scheme)
        if not decision.allowed:
            raise Refused(decision.reason)
        return policy

    async def _tunnel(self, sandbox_id: str, connection: _Connection, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        host = connection.host
        # Name and addresses are checked before answering, so a refusal is a clear 403.
        usable = await self._addresses(sandbox_id, connection)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        connection.answered = True
        interceptor = self._interceptors.get(sandbox_id)
        if interceptor is not None and interceptor.covers(host, connection.port):
            await self._intercept(sandbox_id, connection, interceptor, reader, writer)
            return
        # The upstream connection opens while the client sends its ClientHello, but not
        # one byte goes to it until the hello's SNI is the CONNECT host: a fronted name
        # never reaches the server.
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        counts = [0, 0, 0]  # bytes out, bytes in, directions ended
        connecting = asyncio.ensure_future(_connect(connection, usable, done, counts, self.timeouts.connect))
        try:
            hello = await _client_hello(reader, self.timeouts.head)
            try:
                sni = server_name(hello)
            except UnreadableHello as unreadable:
                raise Refused(f"a TLS ClientHello the proxy cannot read whole: {unreadable}") from None
            if sni is None and parse_address(host) is None:
                raise Refused("TLS ClientHello without a server name")
            if sni is not None and sni != host.rstrip(".").lower():
                raise Refused(f"TLS server name {sni!r} does not match CONNECT host {host!r}")
            self._recheck(sandbox_id, connection, usable)  # the policy may have changed meanwhile
            upstream = await connecting
        except BaseException:
            connecting.cancel()
            if connecting.done() and not connecting.cancelled() and connecting.exception() is None:
                connecting.result().abort()
            raise
        await self._splice(sandbox_id, connection, upstream, hello + _buffered(reader), done, counts)

    async def _serve_http(self, sandbox_id: str, connection: _Connection, request: RequestHead,
                          reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Each request on the connection, in turn: checked, sent to an upstream for its own host
        and port (kept while requests name the same one), its response relayed to the end."""
        connection.scheme = "http"
        upstream: Upstream | None = None
        try:
            while True:
                host, port, path = absolute_target(request.target)
                if upstream is not None and not upstream.serves(host, port):
                    self._end_upstream(sandbox_id, upstream)
                    upstream = connection.upstream = None
                    connection.address = ""
                connection.host, connection.port = host, port
                origin = origin_head(request, path, host, port)
                if upstream is None:
                    upstream = await self._open_upstream(sandbox_id, connection)
                else:
                    self._recheck(sandbox_id, connection, [ipaddress.ip_address(connection.address)])
                if not await exchange(connection, request, origin, reader, writer, upstream):
                    break
                head = await next_head(reader, self.timeouts.idle, self.timeouts.head)
                if head is None:
                    break
                request = parse_request(head)
        finally:
            if upstream is not None:
                self._end_upstream(sandbox_id, upstream)
        writer.close()  # after what is buffered for the client has gone (an abort would drop it)

    async def _intercept(self, sandbox_id: str, connection: _Connection, interceptor: Interceptor,
                         reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A tunnel to a host with a declared secret: TLS ends here, under a certificate of the
        sandbox's CA for the CONNECT host (a ClientHello naming another is refused); each request
        is read, its Host checked against that name, its placeholders swapped, and sent on over
        verified TLS to the host."""
        host, port = connection.host.rstrip(".").lower(), connection.port
        if _buffered(reader):
            raise Refused("the client sent data before the tunnel was established")
        named: list[str | None] = []

        def on_name(name: str | None) -> bool:
            named.append(name)
            return name is not None and name.rstrip(".").lower() == host

        try:
            await writer.start_tls(interceptor.server_context(host, on_name),
                                   ssl_handshake_timeout=self.timeouts.head)
        except (ssl.SSLError, OSError, TimeoutError) as error:
            if named and named[0] is None:
                raise Refused("TLS ClientHello without a server name") from None
            if named and named[0] != host:
                raise Refused(f"TLS server name {named[0]!r} does not match CONNECT host {host!r}") from None
            raise Refused(f"the TLS handshake with the sandbox failed ({type(error).__name__}: "
                          f"{str(error)[:120]})") from None
        connection.answered = False  # inside TLS now: a refusal is answered there
        upstream: Upstream | None = None
        try:
            head: bytes | None = await read_head(reader, self.timeouts.head, "the request head")
            while head is not None:
                request = parse_request(head)
                origin = interceptor.swap(_inner_head(request, host, port), host, port)
                if upstream is not None and not upstream.serves(host, port):
                    self._end_upstream(sandbox_id, upstream)
                    upstream = None
                if upstream is None:
                    upstream = await self._open_upstream(sandbox_id, connection, upstream_context())
                else:
                    self._recheck(sandbox_id, connection, [ipaddress.ip_address(connection.address)])
                if not await exchange(connection, request, origin, reader, writer, upstream):
                    break
                head = await next_head(reader, self.timeouts.idle, self.timeouts.head)
        finally:
            if upstream is not None:
                self._end_upstream(sandbox_id, upstream)
        writer.close()

    async def _open_upstream(self, sandbox_id: str, connection: _Connection,
                             tls: ssl.SSLContext | None = None) -> Upstream:
        """A connection to the request's host (over ``tls``, verified for its name, if given)."""
        usable = await self._addresses(sandbox_id, connection)
        last_error: Exception | None = None
        tls_error: ssl.SSLError | None = None
        for address in usable:
            try:
                async with asyncio.timeout(self.timeouts.connect):
                    upstream_reader, upstream_writer = await asyncio.open_connection(
                        str(address), connection.port, limit=_HEAD_LIMIT, ssl=tls,
                        server_hostname=connection.host if tls is not None else None)
            except ssl.SSLError as error:  # an OSError, but the host answered: its TLS failed (or its certificate)
                tls_error = last_error = error
                continue
            except (OSError, TimeoutError) as error:
                last_error = error
                continue
            _no_delay(upstream_writer.get_extra_info("socket"))
            connection.address = str(address)
            connection.upstream = upstream_writer.transport
            self._record(sandbox_id, EgressEvent(time.time(), connection.host, connection.port,
                                                 "allowed", "allowed by policy", address=connection.address))
            return Upstream(connection.host, connection.port, connection.address, upstream_reader,
                             upstream_writer)
        if tls_error is not None:
            # No outage: retried, it fails alike (a certificate no trust store here knows, a TLS the
            # proxy does not speak), so 502 as before, and not counted among the hosts that did not answer.
            raise Refused(f"TLS with {connection.host}:{connection.port} failed ({tls_error})", 502)
        raise Refused(f"{UNANSWERED}{connection.host}:{connection.port} ({last_error})", UNAVAILABLE)

    def _end_upstream(self, sandbox_id: str, upstream: Upstream) -> None:
        upstream.writer.close()
        self._record(sandbox_id, EgressEvent(time.time(), upstream.host, upstream.port, "closed",
                                             "connection ended", upstream.counts[0], upstream.counts[1],
                                             upstream.address))

    async def _addresses(self, sandbox_id: str, connection: _Connection) -> list[Address]:
        """The name is checked (before any lookup), resolved here, and each address checked."""
        policy = self._check_name(sandbox_id, connection)
        addresses = _known(connection.host)  # an address, or the proxy's own hosts file's: no lookup to wait for
        if addresses is None:
            async with self._lookups[sandbox_id]:  # there: stop() takes it with the policy _check_name found
                # A lookup that waited its turn is checked again: its sandbox may have stopped meanwhile
                # (its thread would be held for a sandbox that is gone) or its name been denied (a denied
                # name is never asked of the resolver).
                policy = self._check_name(sandbox_id, connection)
                addresses = await _resolve(connection.host, connection.port)
        if not addresses:
            raise Refused(f"cannot resolve {connection.host}", 502)
        verdicts = [(address, _check_address(policy, address, connection.port, connection.scheme))
                    for address in addresses]
        usable = [address for address, verdict in verdicts if verdict.allowed]
        if not usable:
            raise Refused(verdicts[0][1].reason)
        return usable

    def _recheck(self, sandbox_id: str, connection: _Connection, usable: list[Address]) -> None:
        policy = self._check_name(sandbox_id, connection)
        if not all(_check_address(policy, address, connection.port, connection.scheme).allowed
                   for address in usable):
            raise Refused("the policy changed: the address is no longer allowed")

    async def _splice(self, sandbox_id: str, connection: _Connection, upstream: asyncio.WriteTransport,
                      first: bytes, done: asyncio.Future[None], counts: list[int]) -> None:
        """Splice the two transports directly; log the connection when it opens and ends."""
        connection.upstream = upstream
        self._record(sandbox_id, EgressEvent(time.time(), connection.host, connection.port, "allowed",
                                             "allowed by policy", address=connection.address))
        _hand_over(connection.client, _Relay(upstream, done, counts, 0))
        counts[0] += len(first)
        upstream.write(first)
        try:
            await done
        finally:
            self._record(sandbox_id, EgressEvent(time.time(), connection.host, connection.port, "closed",
                                                 "connection ended", counts[0], counts[1], connection.address))

    # ------------------------------------------------------------------- log

    def _record(self, sandbox_id: str, event: EgressEvent) -> None:
        for queue in self._listeners.get(sandbox_id, []):
            self._publish(queue, event)
        ledger, path = self._ledgers.get(sandbox_id), self._logs.get(sandbox_id)
        if ledger is None or path is None:
            return
        ledger.add(event)
        try:
            handle = self._log_files.get(sandbox_id)
            if handle is None:
                # Line-buffered: each event is one write, readable at once by other processes.
                handle = self._log_files[sandbox_id] = open(path, "a", buffering=1)  # noqa: SIM115
            handle.write(json.dumps(vars(event)) + "\n")  # asdict deep-copies every field, on each connection's path
            if handle.tell() > _LOG_LIMIT + self._checkpoint_sizes.get(sandbox_id, 0):
                handle.close()
                del self._log_files[sandbox_id]
                self._checkpoint_sizes[sandbox_id] = _write_checkpoint(path, ledger)
        except OSError:
            pass  # the sandbox's directory is gone: it has ended

    def _publish(self, queue: asyncio.Queue[EgressEvent | None], event: EgressEvent) -> None:
        if queue.qsize() < LIVE_BACKLOG:
            self._say_dropped(queue)
        if queue.qsize() < LIVE_BACKLOG:
            queue.put_nowait(event)
        else:
            self._dropped[queue] = self._dropped.get(queue, 0) + 1

    def _say_dropped(self, queue: asyncio.Queue[EgressEvent | None]) -> None:
        dropped = self._dropped.pop(queue, 0)
        if dropped:
            queue.put_nowait(EgressEvent(time.time(), "?", 0, "dropped",
                                         f"dropped {dropped} events: the subscriber fell {LIVE_BACKLOG} behind"))


class _Relay(asyncio.Protocol):
    """Copies what one side sends straight to the other, with flow control both ways."""

    def __init__(self, peer: asyncio.WriteTransport, done: asyncio.Future[None], counts: list[int],
                 index: int) -> None:
        self.peer = peer
        self.done, self.counts, self.index = done, counts, index

    def data_received(self, data: bytes) -> None:
        self.counts[self.index] += len(data)
        self.peer.write(data)

    def eof_received(self) -> bool:
        # counts[2] counts the directions that have ended; when both have, nothing is left to carry.
        self.counts[2] += 1
        if self.counts[2] < 2 and self.peer.can_write_eof():
            self.peer.write_eof()
            return True  # half-close: the other direction may still be talking
        self.peer.close()
        return False

    def pause_writing(self) -> None:
        # This side's send buffer is full: stop reading from the side that fills it.
        if isinstance(self.peer, asyncio.ReadTransport):
            self.peer.pause_reading()

    def resume_writing(self) -> None:
        if isinstance(self.peer, asyncio.ReadTransport):
            self.peer.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.peer.is_closing():
            self.peer.close()
        if not self.done.done():
            self.done.set_result(None)


async def _connect(connection: _Connection, addresses: list[Address], done: asyncio.Future[None],
                   counts: list[int], timeout: float) -> asyncio.WriteTransport:
    loop = asyncio.get_running_loop()
    last_error: Exception | None = None
    for address in addresses:
        try:
            async with asyncio.timeout(timeout):
                transport, _ = await loop.create_connection(
                    lambda: _Relay(connection.client, done, counts, 1), str(address), connection.port)
        except (OSError, TimeoutError) as error:
            last_error = error
            continue
        _no_delay(transport.get_extra_info("socket"))
        connection.address = str(address)
        return transport
    raise Refused(f"{UNANSWERED}{connection.host}:{connection.port} ({last_error})", UNAVAILABLE)


def _inner_head(request: RequestHead, host: str, port: int) -> bytes:
    """A request read inside an intercepted tunnel, as the host gets it. Its Host must name the
    tunnel's host: another would be domain fronting, carried to a host the policy never saw."""
    if request.method == "CONNECT" or not request.target.startswith("/"):
        raise Refused(f"a request inside TLS to {host} must name a path, not {request.target[:80]!r}", 400)
    hosts = request.values("host")
    try:
        named = split_host_port(hosts[0], port) if len(hosts) == 1 else None
    except ValueError:
        named = None
    if hosts and named != (host, port):
        raise Refused(f"Host header {hosts[0][:80]!r} inside TLS to {host!r} (domain fronting)")
    return origin_head(request, request.target, host, port, default_port=443)


def _hand_over(client: asyncio.WriteTransport, relay: _Relay) -> None:
    """Move the client's transport from its stream reader to the relay."""
    client.set_protocol(relay)
    if isinstance(client, asyncio.ReadTransport) and not client.is_reading():
        client.resume_reading()  # the stream reader may have paused it when its buffer filled


def _buffered(reader: asyncio.StreamReader) -> bytes:
    """Bytes the client sent beyond what was parsed (TLS early data, say): none may be lost
    when its transport passes from the stream reader to the relay."""
    buffer = getattr(reader, "_buffer", b"")
    data = bytes(buffer)
    if isinstance(buffer, bytearray):
        buffer.clear()
    return data


async def _client_hello(reader: asyncio.StreamReader, timeout: float) -> bytes:
    """The first TLS record the client sends; a tunnel that does not start with one is refused."""
    try:
        async with asyncio.timeout(timeout):
            header = await reader.readexactly(TLS_RECORD_HEADER)
            length = client_hello_length(header)
            if length is None:
                raise Refused("a tunnel must start with a TLS ClientHello (only TLS is carried)")
            return header + await reader.readexactly(length - TLS_RECORD_HEADER)
    except TimeoutError:
        raise Refused(f"the TLS ClientHello did not arrive within {timeout:g}s", 408) from None


def _refusal(error: Exception) -> Refused:
    """Why a connection that failed on the client's side was not carried, as a refusal to log."""
    if isinstance(error, asyncio.IncompleteReadError):
        if not error.partial.strip(b"\r\n"):
            return Refused("the client closed the connection before sending a request", 400)
        return Refused(f"the client closed the connection {len(error.partial)} bytes into a message "
                       "(its end never came)", 400)
    if isinstance(error, asyncio.LimitOverrunError):
        return Refused(f"a head longer than {_HEAD_LIMIT} bytes", 431)
    if isinstance(error, TimeoutError):
        return Refused("timed out", 408)
    if isinstance(error, ssl.SSLError):  # inside an intercepted tunnel: the sandbox's side or the host's
        return Refused(f"TLS failed inside the tunnel ({error.reason or type(error).__name__})", 502)
    if isinstance(error, ConnectionError):
        return Refused(f"the client's connection failed ({error.strerror or type(error).__name__})", 400)
    return Refused(f"a malformed request ({type(error).__name__}: {str(error)[:80]})", 400)


def _known(host: str) -> list[Address] | None:
    """The addresses of ``host`` known without a lookup: itself, if it is one, or the proxy's own
    hosts file's; None if it must be looked up."""
    literal = parse_address(host)
    if literal is not None:
        return [literal]
    return _overrides().get(host)


async def _resolve(host: str, port: int) -> list[Address]:
    """The addresses a lookup gives ``host`` (one :func:`_known` has none for)."""
    try:
        infos = await asyncio.get_running_loop().run_in_executor(
            _lookup_threads(), functools.partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM))
    except socket.gaierror as error:
        if error.errno == socket.EAI_AGAIN:
            # The resolver did not answer, or failed for now (down, unreachable, SERVFAIL): an outage
            # of the host's, answered as one (503, which clients retry), and not "no such name".
            raise Refused(f"{UNANSWERED}{host}:{port} (its name could not be looked up: {error.strerror})",
                          UNAVAILABLE) from None
        return []
    except OSError as error:
        # EAI_SYSTEM, which Python raises as the OSError under it: the lookup failed here, not at the
        # host (out of descriptors, say). For now, so 503; not said of the host, which nobody asked.
        raise Refused(f"{host}:{port}: the proxy could not look its name up now ({error.strerror or error})",
                      UNAVAILABLE) from None
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))


@functools.cache
def _lookup_threads() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(LOOKUP_THREADS, thread_name_prefix="errand-egress-lookup")


# A forked child has none of the pool's threads, yet its copy counts the idle ones it had: a lookup
# given to it would wait for ever. The child makes a pool of its own when it first looks a name up.
os.register_at_fork(after_in_child=_lookup_threads.cache_clear)


def _check_address(policy: Network, address: Address, port: int, scheme: Scheme) -> Decision:
    """The policy's verdict; then the host's own addresses (any interface, public ones
    included), which reach services bound to 0.0.0.0 on the host: refused like loopback,
    unless a CIDR names them."""
    decision = decide_address(policy, address, port, scheme)
    if decision.allowed and not cidr_allows(policy, address, port, scheme) and _is_local(address):
        return Decision(False, f"resolves to an address of this host ({address})")
    return decision


def _is_local(address: Address) -> bool:
    """Whether ``address`` belongs to this host right now: binding to it succeeds only then.
    One syscall, always current (no cached interface list to go stale)."""
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((str(address), 0))
        except OSError:
            return False
    return True


def _overrides() -> dict[str, list[Address]]:
    """``ERRAND_EGRESS_HOSTS="name=addr,name=addr"``: the proxy's own hosts file (test hosts)."""
    mapping: dict[str, list[Address]] = {}
    for item in filter(None, os.environ.get("ERRAND_EGRESS_HOSTS", "").split(",")):
        name, _, address = item.partition("=")
        mapping.setdefault(name.strip().lower(), []).append(ipaddress.ip_address(address.strip()))
    return mapping


def _no_delay(sock: socket.socket | None) -> None:
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def _reply(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    if writer.transport.is_closing():
        return
    body = f"errand egress proxy: {reason}\n".encode()
    phrase = {400: "Bad Request", 403: "Forbidden", 408: "Request Timeout", 431: "Request Header Fields Too Large",
              502: "Bad Gateway", UNAVAILABLE: "Service Unavailable"}.get(status, "Error")
    writer.write(f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                 f"Connection: close\r\n\r\n".encode() + body)
    try:
        await writer.drain()
    except ConnectionError:
        pass


def _ledger_of(path: Path) -> EgressLedger:
    """The ledger of what ``path`` already holds (none for a new sandbox), so its counts go on."""
    try:
        return read_ledger(path.read_text(errors="replace"))
    except FileNotFoundError:
        return EgressLedger()


def _write_checkpoint(path: Path, ledger: EgressLedger) -> int:
    """Replace the log at ``path`` with one line holding all ``ledger`` knows (exact counts,
    the first and last refusals, the recent events); its size. Readers see the old file or
    the new one, never half of either."""
    line = (ledger.checkpoint() + "\n").encode()
    partial = path.with_suffix(".checkpoint")
    partial.write_bytes(line)
    os.replace(partial, path)
    return len(line)

