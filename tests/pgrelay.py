"""A relay on loopback TCP to the tests' PostgreSQL (which listens on a Unix socket only), for the
bad days a database's network has: a connection that goes silent (nothing passes, nothing closes),
and one cut after the server committed a write and before its answer reached errand."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import sqlalchemy as sa

__all__ = ["Relay"]

_COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"  # the simple query psycopg sends to commit
_WROTE = b"txid_current"  # what a write asks before it commits (an event's in its lock, else _if_assigned)


class Relay:
    """Relays each connection made to it to the database of ``url``. :meth:`freeze` silences the
    connections it holds; :meth:`cut_after_commit` cuts the next connection that commits, once the
    server has answered, without passing the answer on. Connections made later are relayed."""

    def __init__(self, url: str | sa.URL) -> None:
        url = sa.make_url(url)
        [self.socket] = Path(str(url.query["host"])).glob(".s.PGSQL.*[0-9]")
        self.url = url
        self.held: list[asyncio.StreamWriter] = []
        self.frozen: set[asyncio.StreamWriter] = set()
        self.cut: list[asyncio.StreamWriter] = []
        self.cutting: str | None = None  # "after" or "before" the next commit
        self._server: asyncio.Server | None = None
        self._relaying: set[asyncio.Task[object]] = set()

    async def start(self) -> sa.URL:
        """Start relaying; the URL that reaches the database through the relay."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = int(self._server.sockets[0].getsockname()[1])
        return self.url.set(host="127.0.0.1", port=port, query={})

    def freeze(self) -> None:
        self.frozen.update(self.held)

    def cut_after_commit(self) -> None:
        self.cutting = "after"

    def cut_before_commit(self) -> None:
        """Cut the next connection that commits as it sends the commit, which the server never gets."""
        self.cutting = "before"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self.held:
            writer.transport.abort()
        for relaying in self._relaying:
            relaying.cancel()
        await asyncio.gather(*self._relaying, return_exceptions=True)

    async def _serve(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        relaying = asyncio.current_task()
        assert relaying is not None
        self._relaying.add(relaying)
        try:
            server_in, server_out = await asyncio.open_unix_connection(self.socket)
            self.held.append(client_out)
            committing = asyncio.Event()
            await asyncio.gather(self._up(client_in, server_out, client_out, committing),
                                 self._down(server_in, client_out, committing), return_exceptions=True)
        except asyncio.CancelledError:
            return  # closed: asyncio's server would log a cancelled handler as an error

    async def _up(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, client: asyncio.StreamWriter,
                  committing: asyncio.Event) -> None:
        tail, wrote = b"", False
        while data := await source.read(65536):
            await self._still(client)
            wrote = wrote or _WROTE in data
            if self.cutting and wrote and _COMMIT in tail + data:
                cutting = self.cutting
                self.cutting = None
                if cutting == "before":
                    self.cut.append(client)
                    client.transport.abort()
                    sink.close()
                    return
                committing.set()
            if _COMMIT in tail + data:
                wrote = False
            tail = data[-len(_COMMIT):]
            sink.write(data)
            await sink.drain()
        sink.close()

    async def _down(self, source: asyncio.StreamReader, client: asyncio.StreamWriter,
                    committing: asyncio.Event) -> None:
        while data := await source.read(65536):
            await self._still(client)
            if committing.is_set():  # the server answered the commit: it is done, and errand never hears
                self.cut.append(client)
                client.transport.abort()
                return
            client.write(data)
            await client.drain()
        client.close()

    async def _still(self, client: asyncio.StreamWriter) -> None:
        if client in self.frozen:
            await asyncio.Event().wait()  # silent for good: nothing passes, nothing closes


class RelayThread:
    """A :class:`Relay` on an event loop of its own, for tests whose code under test blocks."""

    def __init__(self, url: str | sa.URL) -> None:
        self.relay = Relay(url)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> sa.URL:
        self._thread.start()
        return asyncio.run_coroutine_threadsafe(self.relay.start(), self._loop).result(60)

    def __exit__(self, *_exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.relay.close(), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(60)
        self._loop.close()
