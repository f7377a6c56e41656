"""What errand's home keeps for callers above the sandbox: images under an id of theirs, host trees as layers.

Task setup is the user: the image a setup's snapshot is, kept under the
environment's cache key with labels naming what goes with it, and the files
setup wrote into the working tree, kept as a layer of their own for working
copies to overlay. A later round finds both instead of running setup again.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from errand.errors import ConfigError
from errand.sandbox._images.layers import LayerStore
from errand.sandbox.image import Image

__all__ = ["find_image", "find_layer", "keep_image", "keep_layer"]

T = TypeVar("T")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


def find_image(image_id: str) -> Image | None:
    """The image kept under ``image_id`` (see :func:`keep_image`), or None if it, or a layer of it, is gone."""
    config = LayerStore().cached_image(_checked(image_id))
    return Image.from_config(config) if config is not None else None


def keep_image(image: Image, image_id: str, labels: Mapping[str, str]) -> Image:
    """Keep a resolved image (a snapshot, or a built one) under ``image_id``, its labels
    joined by ``labels``; :func:`find_image` and ``Image.from_id`` find it again."""
    if image.config is None:
        raise ConfigError("only a resolved image (a snapshot, or what build() returned) can be kept",
                          code="invalid_image")
    config = replace(image.config, key=_checked(image_id), labels={**image.config.labels, **labels})
    LayerStore().save_image(config)
    return Image.from_config(config)


def find_layer(name: str) -> Path | None:
    """Where the layer kept as ``name`` (see :func:`keep_layer`) is, or None."""
    store = LayerStore()
    return store.path(name) if store.has(_checked(name)) else None


def keep_layer(name: str, fill: Callable[[Path], T]) -> tuple[Path, T]:
    """Keep a host tree as the layer ``name``: ``fill`` writes it into the empty directory
    it is given (in overlayfs's format); returns where the layer is, and what ``fill`` did.
    If the layer is kept already, that one stays (layers are named by their content)."""
    store = LayerStore()
    partial = store.partial()
    try:
        filled = fill(partial)
        return store.commit(partial, _checked(name)), filled
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def _checked(name: str) -> str:
    # Ids and names become file names in errand's home.
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"not an image id or layer name: {name!r}", code="invalid_image")
    return name
