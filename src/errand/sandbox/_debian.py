"""Debian roots built with mmdebstrap (being written)."""

from __future__ import annotations

from collections.abc import Callable

from errand.errors import BackendUnavailable
from errand.sandbox.layers import ImageConfig, LayerStore


async def debian_config(store: LayerStore, suite: str, log: Callable[[str], None]) -> ImageConfig:
    raise BackendUnavailable("Image.debian() is not available yet")
