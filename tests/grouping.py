"""How the suite's tests go out to pytest-xdist workers (``--dist loadgroup``): the tests of a module
sharing a fixture made once per module go to one worker, and the long tests go out first.

tests/conftest.py calls :func:`group_and_order` from a ``tryfirst`` hook: pytest-xdist reads the
``xdist_group`` marks in a collection hook of its own, so marks added after it are never read and
each worker that draws one of such a module's tests makes the fixture again (the Debian image was
built on every worker, the escape battery's finished task made four times)."""

from __future__ import annotations

import os

import pytest


def group_and_order(config: pytest.Config, items: list[pytest.Item], root: str) -> None:
    for item in items:
        if shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(os.path.relpath(str(item.path), root)))
    if hasattr(config, "workerinput"):
        # On workers, the slow tests and the modules that run whole on one worker are handed out
        # first: one started last would keep a worker busy alone while the others stand idle.
        items.sort(key=lambda item: not (item.get_closest_marker("slow") or item.get_closest_marker("xdist_group")))


def shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture made once per module (or class or package), such as a Debian
    image built in minutes: then its module's tests run on one worker, which makes it once."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(definitions[-1].scope in ("module", "class", "package")
               for definitions in info.name2fixturedefs.values() if definitions)
