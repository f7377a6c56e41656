"""How the suite's tests go out to pytest-xdist workers (``--dist loadgroup``): the tests of a module
sharing a fixture made once per module go to one worker, so do the tests that install the same agent
CLI, and the long tests go out first.

tests/conftest.py calls :func:`group_and_order` from a ``tryfirst`` hook: pytest-xdist reads the
``xdist_group`` marks in a collection hook of its own, so marks added after it are never read and
each worker that draws one of such a module's tests makes the fixture again (the Debian image was
built on every worker, the escape battery's finished task made four times)."""

from __future__ import annotations

import os

import pytest

from errand.agent.seam import EXTERNAL_KINDS


def group_and_order(config: pytest.Config, items: list[pytest.Item], root: str) -> None:
    for item in items:
        group = agent_cli_group(os.path.relpath(str(item.path), root))
        if group is None and shares_a_module_fixture(item):
            group = os.path.relpath(str(item.path), root)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if hasattr(config, "workerinput"):
        # On workers, the slow tests and the modules that run whole on one worker are handed out
        # first: one started last would keep a worker busy alone while the others stand idle.
        items.sort(key=lambda item: not (item.get_closest_marker("slow") or item.get_closest_marker("xdist_group")))


def agent_cli_group(where: str) -> str | None:
    """The group of a test module that runs an agent CLI in a task (``engine/test_codex.py``,
    ``engine/test_codex_mcp.py``): its tests and those of the CLI's other modules go to one worker.
    The CLI's image layer (mini-swe-agent's is 730 MB from the Python registry, Claude Code's
    384 MB from npm) is cached in the worker's errand home, so it is installed once per run rather
    than on each worker that draws one of the CLI's tests, at the same time as the others."""
    directory, name = os.path.split(where)
    if directory != "engine":
        return None
    for kind in EXTERNAL_KINDS:
        stem = "test_" + kind.replace("-", "_")
        if name == stem + ".py" or name.startswith(stem + "_"):
            return f"agent-cli:{kind}"
    return None


def shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture made once per module (or class or package), such as a Debian
    image built in minutes: then its module's tests run on one worker, which makes it once."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(definitions[-1].scope in ("module", "class", "package")
               for definitions in info.name2fixturedefs.values() if definitions)
