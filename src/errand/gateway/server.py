"""The model gateway: a host-side HTTP server that forwards a sandbox's model calls with the
real key, meters them, stops them at the budget, and writes them down.

uvicorn serves a plain ASGI callable on a loopback socket; httpx forwards. A
request's token (``x-api-key``, ``Authorization: Bearer``, ``x-goog-api-key`` or
Gemini's ``?key=``, as each CLI sends it) names its :class:`~errand.gateway.Grant`;
the token is taken out, the grant's real key put in, and the request sent to the
grant's upstream on a route of the grant's protocol only. The reply goes back
chunk by chunk as it arrives (nothing is held back to meter it); a copy is read
for the usage the provider reports. Refusals — an unknown or revoked token, a
route the protocol has not, a spent budget — come in the provider's own error
shape, so the agent CLI shows them as it would the provider's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import httpx

from errand.gateway.errors import GatewayError
from errand.gateway.grants import Budget, Call, Grant, Upstream, check_grant_id
from errand.gateway.protocols import (
    Protocol,
    Route,
    error_body,
    error_status,
    model_of,
    protocol_guess,
    route_of,
    usage_of_event,
    usage_of_reply,
    wants_stream,
    with_output_cap,
    with_stream_usage,
)
from errand.gateway.sse import EventReader
from errand.gateway.transcript import BODY_LIMIT, Transcript, TranscriptWriter
from errand.models import Pricing, Usage

__all__ = ["Gateway"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_BODY_LIMIT = 32 << 20  # bytes of one request body
# A request's head: no provider's client sends more than a few kB, and every byte of it would be sent on.
_HEAD_LIMIT = 64 << 10  # bytes
_HEADERS_LIMIT = 200  # lines
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                         "upgrade", "host", "content-length"})
_CREDENTIALS = frozenset({"authorization", "x-api-key", "x-goog-api-key", "api-key", "proxy-authorization", "cookie"})
_KEY_HEADERS: dict[Protocol, str] = {"anthropic": "x-api-key", "gemini": "x-goog-api-key",
                                     "openai-responses": "authorization", "openai-chat": "authorization"}


class _CutStream(Exception):
    """The upstream's reply broke off after the client's had begun: the client's connection is
    ended the same way, so it sees a broken reply, not a short one."""


class _QuietCuts(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], _CutStream))


_QUIET_CUTS = _QuietCuts()


class Gateway:
    """Serves grants on ``host:port`` (loopback, a free port by default); transcripts go to
    ``transcripts/<grant id>.jsonl``. Use ``async with Gateway(...) as gateway``."""

    def __init__(self, transcripts: Path, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.transcripts = Path(transcripts)
        self._host, self._port = host, port
        self._grants: dict[str, Grant] = {}  # by token
        self._ids: dict[str, Grant] = {}  # live grants by id
        self._transcripts: dict[str, Transcript] = {}  # by token
        self._writer = TranscriptWriter()
        self._server: Any = None
        self._client: httpx.AsyncClient | None = None
        self._socket: socket.socket | None = None
        self._mounted: dict[str, Callable[[Scope, Receive, Send], Awaitable[None]]] = {}

    def mount(self, path: str, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        """Serve ``path`` and what is below it with the ASGI ``app``: another host service a sandbox
        reaches through its one relay (errand's tools over MCP), which checks its own credentials."""
        if not path.startswith("/") or path.endswith("/") or path.startswith("/v1"):
            raise GatewayError(f"cannot mount at {path!r}: a path like '/mcp', beside the providers' routes",
                               code="invalid_config")
        self._mounted[path] = app

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> Gateway:
        import uvicorn  # the server's import is paid by the process that runs a gateway, not by every import

        # IPPROTO_TCP named, not left 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP,
        # and without it a kept-alive client's every call waited ~40 ms on a delayed ACK.
        sock = socket.socket(socket.AF_INET6 if ":" in self._host else socket.AF_INET, socket.SOCK_STREAM,
                             socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, self._port))
        sock.listen(1024)
        sock.setblocking(False)
        self._socket = sock
        config = uvicorn.Config(self, lifespan="off", access_log=False, log_level="warning", http="httptools",
                                timeout_keep_alive=60, server_header=False, date_header=False)
        config.load()
        if _QUIET_CUTS not in logging.getLogger("uvicorn.error").filters:
            logging.getLogger("uvicorn.error").addFilter(_QUIET_CUTS)
        self._client = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(600.0, connect=30.0),
                                         limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))
        self._server = uvicorn.Server(config)
        # startup(), not serve(): serve() would take over the process's SIGINT and SIGTERM.
        self._server.lifespan = config.lifespan_class(config)
        await self._server.startup(sockets=[sock])
        return self

    async def stop(self) -> None:
        """Stop serving: calls under way are ended, every transcript closed."""
        if self._server is not None:
            self._server.force_exit = True  # do not wait for kept-alive connections
            await self._server.shutdown(sockets=[self._socket] if self._socket else None)
            self._server = None
        if self._socket is not None:  # a stopped gateway has no address (closing a closed socket does nothing)
            self._socket.close()
            self._socket = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        for transcript in self._transcripts.values():
            transcript.close()
        await asyncio.to_thread(self._writer.stop)

    async def __aenter__(self) -> Gateway:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def address(self) -> tuple[str, int]:
        """The host and port it listens on."""
        if self._socket is None:
            raise GatewayError("the gateway is not started", code="gateway_stopped")
        host, port = self._socket.getsockname()[:2]
        return str(host), int(port)

    @property
    def origin(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    # ---------------------------------------------------------------- grants

    async def grant(self, grant_id: str, upstream: Upstream, budget: Budget | None = None, *,
                    pricing: Pricing | None = None) -> Grant:
        """A new grant: a fresh token for ``upstream``, stopped at ``budget``, its calls priced by
        ``pricing`` (else errand's table of models, by the model each call names)."""
        check_grant_id(grant_id)
        if not isinstance(upstream, Upstream):
            raise GatewayError("upstream must be an Upstream(...) value", code="invalid_config")
        budget = Budget() if budget is None else budget
        if not isinstance(budget, Budget) or (pricing is not None and not isinstance(pricing, Pricing)):
            raise GatewayError("budget must be a Budget(...) and pricing a Pricing(...)", code="invalid_config")
        if grant_id in self._ids:
            raise GatewayError(f"a live grant already has the id {grant_id!r}; revoke it first",
                               code="grant_exists")
        token = "errand-gw-" + secrets.token_urlsafe(32)
        grant = Grant(grant_id, upstream, budget, pricing, token, self.origin,
                      self.transcripts / f"{grant_id}.jsonl")
        self._grants[token] = self._ids[grant_id] = grant
        self._transcripts[token] = Transcript(grant.transcript, (upstream.key, token), self._writer)
        return grant

    async def settle(self, grant: Grant) -> None:
        """Returns once no call of ``grant`` is under way and its transcript is written: its
        usage, cost and transcript are then whole (a client has a reply's last byte a moment
        before the gateway has accounted for it)."""
        await grant.idle.wait()
        await self._writer.flush()

    async def revoke(self, grant: Grant | str) -> None:
        """Refuse the grant's token from now on (a call under way finishes)."""
        found = self._ids.pop(grant if isinstance(grant, str) else grant.id, None)
        if found is None:
            raise GatewayError(f"no live grant {grant if isinstance(grant, str) else grant.id!r}",
                               code="unknown_grant")
        found.revoked = True

    # ---------------------------------------------------------------- requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        mounted = next((app for prefix, app in self._mounted.items()
                        if path == prefix or path.startswith(prefix + "/")), None)
        if mounted is not None:
            await mounted(scope, receive, send)
            return
        if len(scope["headers"]) > _HEADERS_LIMIT or sum(
                len(name) + len(value) for name, value in scope["headers"]) > _HEAD_LIMIT:
            await _refuse(send, protocol_guess(path, {}), "invalid",
                          f"errand gateway: a request head over {_HEADERS_LIMIT} lines or {_HEAD_LIMIT} bytes")
            return
        headers = _headers(scope)
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        token = _token(headers, query)
        grant = self._grants.get(token) if token else None
        if grant is None or grant.revoked:
            why = "this token was revoked" if grant is not None else "no grant has this token"
            await _refuse(send, protocol_guess(path, headers), "authentication",
                          f"errand gateway: invalid API key ({why})")
            return
        protocol = grant.upstream.protocol
        route = route_of(protocol, scope["method"], path)
        if route is None:
            await _refuse(send, protocol, "not_found",
                          f"errand gateway: {scope['method']} {path} is not a route of the {protocol} API")
            return
        body = await _body(receive)
        if body is None:
            await _refuse(send, protocol, "invalid", f"errand gateway: a request body over {_BODY_LIMIT} bytes")
            return
        await self._forward(grant, route, scope["method"], path, headers, query, body, receive, send)

    async def _forward(self, grant: Grant, route: Route, method: str, path: str, headers: dict[str, str],
                       query: list[tuple[str, str]], body: bytes, receive: Receive, send: Send) -> None:
        protocol = grant.upstream.protocol
        document = _json(body)
        grant.requests += 1
        call = Call(grant.requests, method, path, model_of(protocol, route.relative, document), time.time(),
                    streamed=wants_stream(protocol, route.relative, document))
        transcript = self._transcripts[grant.token]
        transcript.request(call.number, method, path, headers, body, document is not None)
        refusal = _refusal(grant, route, call.model)
        if refusal is not None:
            transcript.note(call.number, reason=refusal)
            await _refuse(send, protocol, "budget", f"errand gateway: this task's {refusal}")
            return
        amended = with_stream_usage(protocol, document)
        held = 0
        left = grant.output_left(call.model) if route.generates else None
        if left is not None:
            capped = with_output_cap(protocol, document if amended is None else amended, left) if left > 0 else None
            if capped is None:
                refusal = (f"budget cannot hold this call: {max(left, 0):,} output tokens are left to give it "
                           f"({grant.held:,} are held by calls under way), and a call under a budget must be a JSON "
                           "request whose reply can be held to them")
                transcript.note(call.number, reason=refusal)
                await _refuse(send, protocol, "budget", f"errand gateway: this task's {refusal}")
                return
            amended, held = capped
        grant.calls.append(call)
        if amended is not None:
            body = json.dumps(amended).encode()  # written anew: no second spelling of a key is passed on
        request = self._upstream_request(grant, route, method, headers, query, body)
        grant.in_flight += 1
        dollars = grant.hold(held, call.model)
        grant.idle.clear()
        try:
            await _Exchange(grant, call, transcript, send).run(self._client_or_fail(), request, receive)
        finally:
            grant.release(held, dollars)
            grant.in_flight -= 1
            if not grant.in_flight:
                grant.idle.set()

    def _client_or_fail(self) -> httpx.AsyncClient:
        if self._client is None:
            raise GatewayError("the gateway is stopped", code="gateway_stopped")
        return self._client

    def _upstream_request(self, grant: Grant, route: Route, method: str, headers: Mapping[str, str],
                          query: list[tuple[str, str]], body: bytes) -> httpx.Request:
        upstream = grant.upstream
        sent = {name: value for name, value in headers.items()
                if name not in _HOP_BY_HOP and name not in _CREDENTIALS and name != "accept-encoding"}
        # Uncompressed, so the copy the gateway reads for usage is readable as it passes.
        sent["accept-encoding"] = "identity"
        key_header = "authorization" if upstream.bearer else _KEY_HEADERS[upstream.protocol]
        sent[key_header] = f"Bearer {upstream.key}" if key_header == "authorization" else upstream.key
        kept = [(name, value) for name, value in query if name != "key"]
        url = upstream.base_url.rstrip("/") + route.relative + (f"?{urlencode(kept)}" if kept else "")
        return self._client_or_fail().build_request(method, url, headers=sent, content=body)


class _Exchange:
    """One forwarded call: the upstream's reply relayed to the client as it comes, metered."""

    def __init__(self, grant: Grant, call: Call, transcript: Transcript, send: Send) -> None:
        self.grant, self.call, self.transcript, self.send = grant, call, transcript, send
        self.protocol = grant.upstream.protocol
        self.kept = bytearray()
        self.events = EventReader()
        self.final = False
        self.reply_headers: dict[str, str] = {}

    async def run(self, client: httpx.AsyncClient, request: httpx.Request, receive: Receive) -> None:
        """Relay the call; a client that leaves ends it (a CLI killed mid-call leaves no call
        waiting on the provider), metered for what had arrived."""
        relay = asyncio.ensure_future(self._relay(client, request))
        left = asyncio.ensure_future(_client_left(receive))
        try:
            await asyncio.wait((relay, left), return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
            if not relay.done():
                relay.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await relay
        if not relay.cancelled():
            relay.result()  # a cut stream ends the client's connection the same way

    async def _relay(self, client: httpx.AsyncClient, request: httpx.Request) -> None:
        try:
            response = await client.send(request, stream=True)
        except httpx.HTTPError as error:
            self._end(None, f"the upstream could not be reached ({type(error).__name__}: {error})")
            await _refuse(self.send, self.protocol, "upstream", "errand gateway: the upstream could not be "
                          f"reached ({type(error).__name__})")
            return
        except asyncio.CancelledError:
            self._end(None, "the client left before the upstream answered")
            raise
        cut: str | None = None
        try:
            await self._start(response)
            async for chunk in response.aiter_raw():
                self._take(chunk)
                await self.send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.HTTPError as error:
            cut = f"the upstream's reply broke off ({type(error).__name__}: {error})"
        except asyncio.CancelledError:
            cut = "the client left before the reply ended"
            raise
        finally:
            await response.aclose()
            self._end(response, cut)
        if cut is not None:
            raise _CutStream(cut)
        await self.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _start(self, response: httpx.Response) -> None:
        self.call.status = response.status_code
        self.reply_headers = {name.lower(): value for name, value in response.headers.items()}
        self.call.streamed = self.reply_headers.get("content-type", "").startswith("text/event-stream")
        headers = [(name, value) for name, value in response.headers.raw
                   if name.decode("latin-1").lower() not in _HOP_BY_HOP or name.lower() == b"content-length"]
        # The upstream's length is kept: the bytes relayed are its own, and a reply of known length goes out
        # without chunking (one write fewer per call); one that breaks off short is then a broken reply.
        await self.send({"type": "http.response.start", "status": response.status_code, "headers": headers})

    def _take(self, chunk: bytes) -> None:
        if len(self.kept) < BODY_LIMIT:
            self.kept += chunk
        if not self.call.streamed:
            return
        for data in self.events.feed(chunk):
            seen = usage_of_event(self.protocol, data, self.call.usage)
            if seen.usage is not None:
                self.call.usage = seen.usage
            self.final = self.final or seen.final

    def _end(self, response: httpx.Response | None, error: str | None) -> None:
        call = self.call
        call.ended = time.time()
        document = _json(bytes(self.kept)) if response is not None and not call.streamed else None
        if response is not None and not call.streamed:
            call.usage = usage_of_reply(self.protocol, document)
        if error is None and call.streamed and response is not None and response.is_success and not self.final:
            error = "the upstream's stream ended before its last event"
        call.error = error
        call.complete = error is None
        pricing = self.grant.price(call.model)
        call.cost = pricing.cost(call.usage) if pricing is not None and call.usage is not None else None
        metered = {"usage": _usage_fields(call.usage), "cost": call.cost, "complete": call.complete,
                   "error": call.error, "model": call.model}
        self.transcript.reply(call.number, call.status, self.reply_headers, bytes(self.kept), document is not None,
                              metered)


def _refusal(grant: Grant, route: Route, model: str | None) -> str | None:
    """Why a call is refused before it is sent, or None."""
    if not route.generates:
        return None
    spent = grant.spent()
    if spent is not None:
        return spent
    if grant.budget.max_cost is not None and grant.price(model) is None:
        return (f"cost budget cannot be kept: errand knows no price for model {model!r} "
                "(give the grant prices)")
    return None


def _usage_fields(usage: Usage | None) -> dict[str, int] | None:
    if usage is None:
        return None
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cache_read_tokens": usage.cache_read_tokens, "cache_write_tokens": usage.cache_write_tokens}


def _headers(scope: Scope) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope["headers"]:
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def _token(headers: Mapping[str, str], query: list[tuple[str, str]]) -> str | None:
    """The token, wherever this client put it."""
    for name in ("x-api-key", "x-goog-api-key"):
        if headers.get(name):
            return headers[name].strip()
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return next((value for name, value in query if name == "key" and value), None)


async def _body(receive: Receive) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > _BODY_LIMIT:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _client_left(receive: Receive) -> None:
    """Returns once the client has gone (its request body has been read whole before)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _json(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


async def _refuse(send: Send, protocol: Protocol, kind: str, message: str) -> None:
    status = error_status(protocol, kind)
    payload = json.dumps(error_body(protocol, status, kind, message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if kind != "upstream":
        headers.append((b"x-should-retry", b"false"))  # the SDKs' own hint: the same request would fail again
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": False})
