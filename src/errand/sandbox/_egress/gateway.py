"""The way from a sandbox to the host's model gateway: 127.0.0.1:3129 inside, relayed.

A sandbox has no route to the host's loopback, and its proxy refuses loopback
addresses. A sandbox created with ``gateway="127.0.0.1:PORT"`` (or a Unix
socket's path) gets a second listener in its network namespace, made by the
launcher beside the proxy's; the host accepts on it and splices each
connection, byte for byte, to that one socket and nowhere else. What is said
on it is the gateway's business: it holds no secret a sandbox could ask for
without a grant's token.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket

from errand.errors import ConfigError
from errand.sandbox._backends.spec import GATEWAY_PORT
from errand.sandbox._egress.proxy import _MAX_CONNECTIONS, _buffered, _hand_over, _no_delay, _Relay

__all__ = ["GATEWAY_URL", "GatewayRelay", "check_gateway"]

#: The gateway's base URL inside every sandbox created with one.
GATEWAY_URL = f"http://127.0.0.1:{GATEWAY_PORT}"


def check_gateway(address: object) -> str:
    """``address`` checked: a loopback ``host:port`` (the gateway listens on the host's loopback)
    or an absolute Unix socket path. Anything else would give the sandbox a way to another host."""
    if not isinstance(address, str) or not address.strip():
        raise ConfigError("gateway must be the gateway's host address, '127.0.0.1:PORT' or a Unix socket's path",
                          code="invalid_gateway")
    text = address.strip()
    if text.startswith("/"):
        return os.path.normpath(text)
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"gateway {address!r} must be a loopback address with a port ('127.0.0.1:PORT') "
                          "or an absolute Unix socket path", code="invalid_gateway")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class GatewayRelay:
    """Accepts on a sandbox's gateway listener; each connection spliced to the gateway."""

    def __init__(self, address: str) -> None:
        self.address = check_gateway(address)
        self._server: asyncio.base_events.Server | None = None
        self._live: set[asyncio.WriteTransport] = set()
        self._open = 0  # connections relayed now

    async def serve(self, listener: socket.socket) -> None:
        listener.setblocking(False)
        self._server = await asyncio.start_server(self._relay, sock=listener)

    def close(self) -> None:
        """Stop accepting and end every relayed connection (the sandbox has ended)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for transport in list(self._live):
            transport.abort()
        self._live.clear()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = writer.transport
        if self._open >= _MAX_CONNECTIONS:
            # Each relayed connection costs this process three descriptors (the sandbox's side, the
            # gateway's side, the gateway's own): one sandbox must not take those every other needs.
            client.abort()
            return
        self._open += 1
        try:
            await self._splice(reader, client)
        finally:
            self._open -= 1

    async def _splice(self, reader: asyncio.StreamReader, client: asyncio.WriteTransport) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        counts = [0, 0, 0]  # bytes out, bytes in, directions ended (the proxy's _Relay keeps them)
        try:
            if self.address.startswith("/"):
                upstream, _ = await loop.create_unix_connection(lambda: _Relay(client, done, counts, 1),
                                                                self.address)
            else:
                host, _, port = self.address.rpartition(":")
                upstream, _ = await loop.create_connection(lambda: _Relay(client, done, counts, 1),
                                                           host.strip("[]"), int(port))
        except OSError:
            client.abort()  # the gateway is not there: the client sees its connection end
            return
        _no_delay(upstream.get_extra_info("socket"))
        _no_delay(client.get_extra_info("socket"))
        self._live.update((client, upstream))
        _hand_over(client, _Relay(upstream, done, counts, 0))
        first = _buffered(reader)
        if first:
            upstream.write(first)
        try:
            await done
        finally:
            self._live.discard(client)
            self._live.discard(upstream)
