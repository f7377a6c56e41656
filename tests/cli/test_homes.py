"""Two errand homes on one machine, each as its user drives it through ``errand sandbox``:
neither lists, ends, enters or reaps the other's sandboxes, and each caches apart.

A home's sandboxes are kept in its own runtime directory by default; two homes
pointed at one ``ERRAND_RUNTIME_DIR`` must stay apart as well.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from errand import _settings
from errand.cli import app

runner = CliRunner()
OWNER = ("import asyncio\nfrom errand.sandbox import AsyncSandbox\n"
         "async def main():\n    sandbox = await AsyncSandbox.create(timeout=120)\n"
         "    print(sandbox.id, flush=True)\n    await asyncio.sleep(120)\n"
         "asyncio.run(main())\n")


@dataclass
class Home:
    """One errand home: its ``ERRAND_*`` settings, and the command line run under them."""

    env: dict[str, str | None]

    def cli(self, *args: str) -> Result:
        with pytest.MonkeyPatch.context() as patch:
            self._apply(patch)
            return runner.invoke(app, list(args))

    def ids(self) -> set[str]:
        listed = self.cli("sandbox", "ls", "--json")
        assert listed.exit_code == 0, listed.output
        return {entry["id"] for entry in json.loads(listed.stdout)}

    def create(self) -> str:
        created = self.cli("sandbox", "create", "--timeout", "120")
        assert created.exit_code == 0, created.output
        return created.stdout.strip()

    def orphan(self) -> str:
        """A sandbox whose owner was SIGKILLed: an orphan for this home's gc to reap."""
        environment = {key: value for key, value in {**os.environ, **self.env}.items() if value is not None}
        owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True, env=environment)
        assert owner.stdout is not None
        sandbox_id = owner.stdout.readline().strip()
        owner.kill()
        owner.wait()
        assert sandbox_id.startswith("sb-"), "the owner process failed to create its sandbox"
        return sandbox_id

    def runtime_dir(self) -> Path:
        with pytest.MonkeyPatch.context() as patch:
            self._apply(patch)
            return _settings.runtime_dir()

    def _apply(self, patch: pytest.MonkeyPatch) -> None:
        for key, value in self.env.items():
            if value is None:
                patch.delenv(key, raising=False)
            else:
                patch.setenv(key, value)


@pytest.fixture(params=["default-runtime-dirs", "shared-runtime-dir"])
def homes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Home, Home]]:
    """Two homes: with errand's own runtime directories, or both given one ERRAND_RUNTIME_DIR."""
    shared = tempfile.mkdtemp(prefix="erh-", dir="/run") if request.param == "shared-runtime-dir" else None
    pair = tuple(Home({"ERRAND_HOME": str(tmp_path / name), "ERRAND_RUNTIME_DIR": shared}) for name in "ab")
    yield pair  # type: ignore[misc]
    for home in pair:
        for sandbox_id in home.ids():
            home.cli("sandbox", "rm", "--yes", sandbox_id)
        home.cli("sandbox", "gc")
        if shared is None:
            with_nothing_left(home.runtime_dir())
    if shared is not None:
        shutil.rmtree(shared, ignore_errors=True)


def with_nothing_left(runtime: Path) -> None:
    if runtime.parent == Path("/run/errand") and runtime.is_dir():
        runtime.rmdir()  # fails, and so the test, if a home left anything behind


def test_two_homes_never_list_end_or_enter_each_others_sandboxes(homes: tuple[Home, Home]) -> None:
    a, b = homes
    mine, theirs = a.create(), b.create()
    assert a.ids() == {mine} and b.ids() == {theirs}
    table = a.cli("sandbox", "ls").stdout
    assert mine in table and theirs not in table

    for command in (("sandbox", "rm", theirs), ("sandbox", "exec", theirs, "--", "true")):
        refused = a.cli(*command)
        assert refused.exit_code == 1
        assert refused.stderr.startswith(f"error: no live sandbox '{theirs}'"), refused.stderr
    assert b.ids() == {theirs}
    assert b.cli("sandbox", "exec", theirs, "--", "true").exit_code == 0


def test_gc_of_one_home_never_reaps_the_others(homes: tuple[Home, Home]) -> None:
    a, b = homes
    orphan = b.orphan()
    directory = b.runtime_dir() / orphan
    collected = a.cli("sandbox", "gc")
    assert collected.exit_code == 0, collected.output
    assert orphan not in collected.stdout
    assert (directory / "record.json").exists(), "home a's gc removed home b's sandbox"

    reaped = b.cli("sandbox", "gc")
    assert f"removed sandbox {orphan}" in reaped.stdout
    assert not directory.exists()


def test_each_home_has_its_own_runtime_directory_and_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ERRAND_RUNTIME_DIR")
    monkeypatch.delenv("ERRAND_CACHE_DIR", raising=False)
    seen = {}
    for name in ("a", "b", "a-path-long-enough-to-break-any-socket-path-limit-if-it-were-used-" * 3):
        monkeypatch.setenv("ERRAND_HOME", str(tmp_path / name))
        seen[name] = (_settings.runtime_dir(), _settings.cache_dir(), _settings.user_cache_dir())
        runtime, cache, _ = seen[name]
        assert runtime.parent == Path("/run/errand")
        assert len(str(runtime / "sb-0123456789" / "egress.ctl")) < 107  # a Unix socket path's limit
        assert cache == tmp_path / name / "cache"
    (runtime_a, _, shared_a), (runtime_b, _, shared_b) = seen["a"], seen["b"]
    assert runtime_a != runtime_b
    assert shared_a == shared_b, "compiled helpers are content-addressed: one build serves every home"
    monkeypatch.setenv("ERRAND_CACHE_DIR", str(tmp_path / "cache"))
    assert _settings.cache_dir() == _settings.user_cache_dir() == tmp_path / "cache"
