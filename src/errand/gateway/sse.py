"""Server-sent events read as they pass: bytes in, each whole event's ``data`` out.

The gateway hands every chunk to the client as it arrives and gives a copy to an
:class:`EventReader`, which keeps only the part of an event not yet ended.
"""

from __future__ import annotations

__all__ = ["EventReader"]

_LIMIT = 1 << 22  # bytes of one unfinished event kept; past it the event is dropped (usage is never that big)


class EventReader:
    """Splits a stream into events (a blank line ends one) and joins each one's ``data:`` lines."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[str]:
        """The data of each event ``chunk`` completes."""
        text = (self._pending + chunk).replace(b"\r\n", b"\n")
        *events, self._pending = text.split(b"\n\n")
        if len(self._pending) > _LIMIT:
            self._pending = b""
        return [data for data in (_data(event) for event in events) if data is not None]


def _data(event: bytes) -> str | None:
    lines = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines).decode("utf-8", "replace") if lines else None
