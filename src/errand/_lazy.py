"""A package's face, imported when first asked for (PEP 562).

``from errand.sandbox.config import Resources`` runs ``errand.sandbox``'s
``__init__`` first, and ``errand.tasks.records`` runs ``errand.tasks``'s. A
package whose face imported every module behind it made each of those imports
pay for the whole package: every ``errand`` command loaded the sandbox's
backends, the round and memory's store, whatever it ran. A package that uses
this keeps its names in a ``TYPE_CHECKING`` block (for type checkers and
readers) and a map of the module each comes from; a name is imported the first
time it is asked for, then kept on the package.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["face"]


def face(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: ``homes`` maps each name to its module, relative to the
    package (``"config"``), or to ``"module:attribute"`` where the name is another's
    (``"_backends.gc:collect"`` for ``collect_garbage``)."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = home.partition(":")
        value = getattr(importlib.import_module(f"{package}.{module}"), attribute or name)
        setattr(sys.modules[package], name, value)  # asked once: the next lookup finds it plainly
        return value

    face_module = sys.modules[package]

    def __dir__() -> list[str]:  # dir(), help() and completion list the names not asked for yet too
        return sorted({*face_module.__dict__, *homes})

    face_module.__dict__["_face_homes"] = homes
    face_module.__dict__["__dir__"] = __dir__
    face_module.__class__ = _Face
    return __getattr__


class _Face(types.ModuleType):
    """A package with a lazy face. Loading a submodule binds it to the package's attribute of its
    name; where the face gives that name to something the submodule holds (``errand.memory``'s
    ``distill`` and ``retrieve`` are functions of modules so named), the name keeps meaning that,
    as it did when the face imported it at once."""

    def __setattr__(self, name: str, value: Any) -> None:
        home = self.__dict__.get("_face_homes", {}).get(name)
        if (home is not None and isinstance(value, types.ModuleType)
                and value.__name__ == f"{self.__name__}.{home.partition(':')[0]}"):
            value = getattr(value, home.partition(":")[2] or name)
        super().__setattr__(name, value)
