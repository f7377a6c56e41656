"""The error tree drawn in :mod:`errand.errors` is the tree of classes: every error errand
defines, in every layer, under its real parent, and nothing drawn that does not exist."""

from __future__ import annotations

import importlib
import pkgutil
import re

import errand
import errand.errors
from errand.errors import ErrandError

_ROW = re.compile(r"^(?P<lead>[ │├└─]*)(?P<name>[A-Z]\w+)\b")


def _drawn() -> dict[str, str]:
    """Each drawn class with its parent, read from the indentation of the drawing."""
    assert errand.errors.__doc__ is not None
    block = errand.errors.__doc__.split("::", 1)[1]
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        row = _ROW.match(line.strip("\n")[4:]) if line.startswith("    ") else None
        if row is None:
            continue
        depth = len(row["lead"]) // 4
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parents[row["name"]] = stack[-1][1]
        stack.append((depth, row["name"]))
    return parents


def _defined() -> dict[str, str]:
    for module in pkgutil.walk_packages(errand.__path__, "errand."):
        if ".migrations" not in module.name and not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found: dict[str, str] = {}
    pending = [ErrandError]
    while pending:
        parent = pending.pop()
        for child in parent.__subclasses__():
            if child.__module__.startswith("errand."):
                found[child.__name__] = parent.__name__
                pending.append(child)
    return found


def test_the_drawn_tree_is_the_tree_of_classes() -> None:
    assert _drawn() == _defined()


def test_every_error_has_a_code_of_its_own() -> None:
    # Keyed by the class's full name: a module imported again (a Temporal workflow's sandbox does)
    # makes its classes again until the copies are collected.
    codes = {"errand.errors.ErrandError": ErrandError.code}
    pending = [ErrandError]
    while pending:
        for child in pending.pop().__subclasses__():
            if child.__module__.startswith("errand."):
                codes[f"{child.__module__}.{child.__qualname__}"] = child.code
                pending.append(child)
    assert len(codes.values()) == len(set(codes.values())), codes
