"""Resolve an adapter setting: the argument, then errand's ``ERRAND_*`` variable, then the SDK's own default."""

from __future__ import annotations

import os

__all__ = ["resolve"]


def resolve(explicit: str | None, errand_variable: str) -> str | None:
    """``explicit`` if given, else ``$errand_variable`` if set and non-empty, else ``None``.

    ``None`` leaves the SDK to read its own variable (``OPENAI_API_KEY`` and
    friends), so errand's settings win over the SDK's and arguments over both.
    """
    if explicit is not None:
        return explicit
    return os.environ.get(errand_variable) or None
