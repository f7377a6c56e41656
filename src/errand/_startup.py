"""A process's imports, without the cyclic garbage collector running through them.

Importing errand's server builds hundreds of thousands of objects (FastAPI's
routes, pydantic's models, SQLAlchemy's tables) and frees almost none: the
collector, run every few hundred allocations, finds nothing to collect, and
takes ~20 % of the import's CPU (``errand serve`` 1.06–1.34 s to import
its application, 0.87–0.98 s without). Inside :func:`imports` it does not run;
after, what was imported is frozen (:func:`gc.freeze`), since it lives as
long as the process, so that later full collections do not walk it again
(``errand ls`` 0.54 s of CPU, 0.39 s so).

The ``errand`` command (``errand.__main__``) imports the command line's
modules so before any command runs.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["imports"]


@contextlib.contextmanager
def imports() -> Iterator[None]:
    """Run the block with the collector off, then freeze what it made and turn it back on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()

