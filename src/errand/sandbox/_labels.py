"""Labels: short ``key=value`` tags a sandbox's creator gives it, e.g. the task and run it serves.

They are kept in the sandbox's record and shown wherever sandboxes are listed
(``errand sandbox ls``, the API, the Sandboxes page, which links a ``task``
label to its task), so they are held to a charset that needs no quoting or
escaping anywhere: no spaces, quotes, slashes, markup brackets or control
characters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from errand.errors import ConfigError

__all__ = ["MAX_LABELS", "check_labels"]

MAX_LABELS = 16
_KEY = re.compile(r"[a-z][a-z0-9_.-]{0,62}")
_VALUE = re.compile(r"[A-Za-z0-9_.:@+=-]{1,128}")


def check_labels(labels: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    """The labels as pairs, or ConfigError (code ``invalid_label``) saying what is wrong."""
    if labels is None:
        return ()
    if not isinstance(labels, Mapping):
        raise ConfigError(f"labels must be a mapping of names to values, not {type(labels).__name__}",
                          code="invalid_label")
    if len(labels) > MAX_LABELS:
        raise ConfigError(f"a sandbox takes at most {MAX_LABELS} labels, not {len(labels)}", code="invalid_label")
    for key, value in labels.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise ConfigError(f"label name {key!r} must be 1-63 of a-z, 0-9, '_', '.', '-', starting with a letter",
                              code="invalid_label")
        if not isinstance(value, str) or not _VALUE.fullmatch(value):
            raise ConfigError(f"label {key}'s value {value!r} must be 1-128 of A-Z, a-z, 0-9 and _ . : @ + = -",
                              code="invalid_label")
    return tuple(labels.items())
