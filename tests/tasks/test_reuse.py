"""Which refresh a cached environment gets for a new commit, read from setup and the project."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from errand.tasks.round.reuse import BUILD_DEPS, TSC_BUILD_INFO, prime, refresh


@pytest.mark.parametrize(("setup", "expected"), [
    (".venv/bin/pip install --quiet -e . -r requirements-test.txt",
     f"PYTHONPATH={BUILD_DEPS} .venv/bin/pip install --quiet --disable-pip-version-check --no-deps --no-index "
     "--no-build-isolation -e ."),
    ("python3 -m venv /opt/venv && /opt/venv/bin/pip install --no-build-isolation --no-deps -e '.[dev]'",
     "/opt/venv/bin/pip install --quiet --disable-pip-version-check --no-deps --no-index --no-build-isolation -e ."),
    ("python3 -m pip install --user .",
     f"PYTHONPATH={BUILD_DEPS} python3 -m pip install --quiet --disable-pip-version-check --no-deps --no-index "
     "--no-build-isolation ."),
])
def test_a_python_project_installed_by_setup_is_reinstalled_without_dependencies(
        tmp_path: Path, setup: str, expected: str) -> None:
    assert refresh(tmp_path, [setup], primed=True).commands == (expected,)


def test_unprimed_the_reinstall_builds_in_isolation_and_uv_is_never_primed(tmp_path: Path) -> None:
    [command] = refresh(tmp_path, ["pip install -e ."], primed=False).commands
    assert command == "pip install --quiet --disable-pip-version-check --no-deps -e ."
    assert prime(tmp_path, ["uv pip install -e ."]) == ()
    assert prime(tmp_path, ["pip install --no-build-isolation -e ."]) == ()  # its backend is installed already
    assert refresh(tmp_path, ["uv pip install -e ."], primed=True).commands == (
        "uv pip install --quiet --disable-pip-version-check --no-deps -e .",)


def test_requirements_alone_or_an_unknown_setup_get_no_refresh(tmp_path: Path) -> None:
    for setup in (["pip install -r requirements.txt"], ["pip install -c constraints.txt pytest"], ["make deps"]):
        assert refresh(tmp_path, setup, primed=True).commands == (), setup
        assert prime(tmp_path, setup) == (), setup


def test_prime_installs_the_build_backends_requirements_outside_the_virtualenv(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[build-system]\nrequires = ["hatchling>=1.20", "hatch-vcs"]\n'
                                             'build-backend = "hatchling.build"\n')
    first, editable = prime(tmp_path, [".venv/bin/pip install -e ."])
    assert first.startswith(".venv/bin/pip install --quiet --disable-pip-version-check --target /opt/errand-build")
    assert first.endswith("'hatchling>=1.20' hatch-vcs")
    assert editable.startswith(f"PYTHONPATH={BUILD_DEPS} .venv/bin/python -c ")
    (tmp_path / "pyproject.toml").unlink()  # a setup.py project: what pip assumes
    assert prime(tmp_path, ["pip install ."])[0].endswith("'setuptools>=40.8.0' wheel")


@pytest.mark.parametrize(("setup", "lockfile", "expected"), [
    ("npm ci --no-audit", "package-lock.json", "npm run build"),
    ("pnpm install --frozen-lockfile", "pnpm-lock.yaml", "pnpm run build"),
    ("yarn install --immutable", "yarn.lock", "yarn run build"),
])
def test_a_node_project_gets_its_build_script(tmp_path: Path, setup: str, lockfile: str, expected: str) -> None:
    (tmp_path / lockfile).write_text("")
    (tmp_path / "package.json").write_text(json.dumps({"scripts": {"build": "tsc -p ."}}))
    assert refresh(tmp_path, [setup], primed=False).commands == (expected,)
    (tmp_path / "package.json").write_text(json.dumps({"scripts": {"test": "mocha"}}))
    assert refresh(tmp_path, [setup], primed=False).commands == ()


def _node_project(root: Path, build: str, typescript: str | None = "5.9.3", **scripts: str) -> None:
    (root / "package.json").write_text(json.dumps({"scripts": {"build": build, **scripts}}))
    packages = {"": {"name": "pricing"}, **({"node_modules/typescript": {"version": typescript}} if typescript else {})}
    (root / "package-lock.json").write_text(json.dumps({"lockfileVersion": 3, "packages": packages}))


def test_a_lone_tsc_build_of_npm_runs_incrementally_with_its_build_info_in_the_environment(tmp_path: Path) -> None:
    _node_project(tmp_path, "tsc -p .")
    made = refresh(tmp_path, ["npm ci --no-audit"], primed=False)
    assert made.commands == (f"node_modules/.bin/tsc -p . --incremental --tsBuildInfoFile {TSC_BUILD_INFO}",)
    assert made.why == ("node: the project's build script, incremental",)
    _node_project(tmp_path, "tsc --incremental --tsBuildInfoFile build/info.json")  # the project's own build info
    assert refresh(tmp_path, ["npm ci"], primed=False).commands == (
        "node_modules/.bin/tsc --incremental --tsBuildInfoFile build/info.json",)


@pytest.mark.parametrize(("build", "typescript", "scripts"), [
    ("tsc -p . && node scripts/bundle.js", "5.9.3", {}),  # more than tsc: the script as it is
    ("tsc -b", "5.9.3", {}),  # build mode keeps its own build info
    ("tsc --watch", "5.9.3", {}),
    ("tsc -p 'my config.json'", "5.9.3", {}),  # quoting: the shell's business
    ("tsc -p $CONFIG", "5.9.3", {}),
    ("tsc", "5.9.3", {"prebuild": "node gen.js"}),  # npm would run prebuild first
    ("tsc", "5.9.3", {"postbuild": "node copy.js"}),
    ("tsc", "3.3.4000", {}),  # no --tsBuildInfoFile yet
    ("tsc", None, {}),  # not installed by the lockfile: a global tsc, or another version
    ("tsup src/index.ts", "5.9.3", {}),
])
def test_any_other_build_runs_through_npm_as_it_is(tmp_path: Path, build: str, typescript: str | None,
                                                   scripts: dict[str, str]) -> None:
    _node_project(tmp_path, build, typescript, **scripts)
    assert refresh(tmp_path, ["npm ci"], primed=False).commands == ("npm run build",)


def test_pnpm_and_yarn_run_a_tsc_build_through_their_own_run(tmp_path: Path) -> None:
    _node_project(tmp_path, "tsc -p .")
    assert refresh(tmp_path, ["pnpm install --frozen-lockfile"], primed=False).commands == ("pnpm run build",)
    (tmp_path / "package-lock.json").write_text("{not json")
    assert refresh(tmp_path, ["npm ci"], primed=False).commands == ("npm run build",)
