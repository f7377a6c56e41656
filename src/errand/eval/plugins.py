"""pytest's plugins as the base environment loads them, and nothing a candidate added.

pytest loads every plugin an installed distribution declares (entry point group
``pytest11``) unless ``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` is set — and a candidate
patch can declare one (a ``*.dist-info`` on the path, a ``.pth``). So the grader
runs pytest with autoload off and names the base environment's plugins with
``-p``. Which plugins those are is asked of pytest itself, once per set-up
environment, base commit and test command: the test command runs over a copy of
the base that no patch touched, with a small plugin that prints the
entry-point plugins pytest loaded and ends the session before it collects.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from errand import _settings
from errand._files import read_inside
from errand.tasks.round import steps

if TYPE_CHECKING:
    from errand.eval.context import InstanceContext

__all__ = ["GRADER_DIR", "base_plugins", "hardened"]

GRADER_DIR = ".errand-grader"  # in the listing's copy only: never where a candidate's tests run
_MODULE = "errand_list_plugins"
_LIST = "plugins.json"
_LISTER = f'''\
"""errand's grader: write down the plugins pytest loaded by entry point, then end the session."""
import json

import pytest


def pytest_configure(config):
    names = sorted({{getattr(plugin, "__name__", "") for plugin, _ in config.pluginmanager.list_plugin_distinfo()}})
    with open("{steps.WORKSPACE}/{GRADER_DIR}/{_LIST}", "w") as listed:
        json.dump([name for name in names if name], listed)
    pytest.exit("errand listed the plugins", returncode=0)
'''


def hardened(command: str, plugins: Sequence[str]) -> str:
    """``command`` run with plugin autoload off and the base's entry-point plugins named."""
    options = " ".join(f"-p {shlex.quote(name)}" for name in plugins)
    return f"export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTEST_ADDOPTS={shlex.quote(options)}; {command}"


async def base_plugins(context: InstanceContext, command: str) -> tuple[str, ...]:
    """The modules of the plugins pytest loads by entry point in ``context``'s set-up
    environment over its base commit, running ``command``; cached on disk."""
    digest = hashlib.sha256(json.dumps([context.setup.key, context.task.base_commit, command]).encode())
    cached_at = _settings.cache_dir() / "eval-plugins" / f"{digest.hexdigest()[:32]}.json"
    try:
        return tuple(json.loads(cached_at.read_text()))
    except (OSError, ValueError):
        pass
    names = await _listed(context, command)
    cached_at.parent.mkdir(parents=True, exist_ok=True)
    partial = cached_at.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(names))
    os.replace(partial, cached_at)
    return names


async def _listed(context: InstanceContext, command: str) -> tuple[str, ...]:
    copy = await steps.prepared_copy(context.task, context.run, setup=context.setup, name="base")
    try:
        await asyncio.to_thread(_write_lister, copy.path)
        sandbox = await steps.start_sandbox(context.environment, context.setup, copy,
                                            labels={"task": context.task.id, "run": context.run.id,
                                                    "role": "plugins"})
        try:
            where = f"{steps.WORKSPACE}/{GRADER_DIR}"
            await steps.check(sandbox, f'export PYTHONPATH={where}"${{PYTHONPATH:+:$PYTHONPATH}}" '
                                       f"PYTEST_PLUGINS={_MODULE}; {command}")
        finally:
            await sandbox.terminate()
        listed = await asyncio.to_thread(read_inside, copy.path, f"{GRADER_DIR}/{_LIST}", 1024**2)
    finally:
        await asyncio.to_thread(copy.remove)
    return _parsed(b"" if listed is None else listed[0])


def _write_lister(tree: Path) -> None:
    where = tree / GRADER_DIR
    where.mkdir()
    os.chmod(where, 0o777)  # the sandbox's user writes the list here (a copy no candidate touches)
    (where / f"{_MODULE}.py").write_text(_LISTER)
    os.chmod(where / f"{_MODULE}.py", 0o644)


def _parsed(listed: bytes) -> tuple[str, ...]:
    try:
        names = json.loads(listed)
    except ValueError:
        return ()
    return tuple(name for name in names if isinstance(name, str)) if isinstance(names, list) else ()
