"""An environment for a repository without ``errand.toml``, read off its files.

A repository errand has never seen should not reach review with "no test command is
configured". :func:`detect` looks at a checkout's files (it runs none of them) and writes the
``errand.toml`` a person would: how to install the project and its test dependencies, and
how to run its tests. Each choice carries the files that led to it, so the log and ``errand
init`` can say why. The result is read by the same reader as a written ``errand.toml``; a
repository with one is never second-guessed.

What it knows: Python projects (``pyproject.toml``, ``setup.py``/``setup.cfg``,
``requirements*.txt``; test dependencies from extras, dependency groups or requirement files;
pytest from its configuration or a ``tests`` folder) and Node projects (``package.json``;
``npm ci`` over a lockfile; ``npm test`` where the script is the project's, not npm's stub).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from errand._files import read_inside

__all__ = ["Detected", "detect"]

_TEST_NAMES = ("test", "tests", "testing", "dev")  # extras and dependency groups, in preference
_REQUIREMENTS = ("requirements-test.txt", "requirements-tests.txt", "test-requirements.txt",
                 "requirements-dev.txt", "dev-requirements.txt", "requirements/test.txt", "requirements/tests.txt",
                 "requirements/dev.txt")
_NPM_STUB = "no test specified"
_MAX_MANIFEST = 1 << 20
_MAX_WALK = 20_000


@dataclass(frozen=True)
class Detected:
    """The ``errand.toml`` errand would use (``toml``), and why (``reasons``, one line each)."""

    toml: str
    reasons: tuple[str, ...]
    setup: tuple[str, ...]
    test: str | None

    def summary(self) -> str:
        """One line: what setup and the tests run, and from which files."""
        setup = " && ".join(f"`{command}`" for command in self.setup) or "nothing"
        tests = f"`{self.test}`" if self.test else "none found"
        return f"setup {setup}, tests {tests} — from {'; '.join(self.reasons)}"


def detect(repo: Path) -> Detected | None:
    """What ``repo``'s files say about setting it up and testing it, or None when they say nothing."""
    for ecosystem in (_python, _node):
        found = ecosystem(repo)
        if found is not None:
            return found
    return None


# ------------------------------------------------------------------ Python


def _python(repo: Path) -> Detected | None:
    pyproject = _toml(repo, "pyproject.toml")
    project = _table(pyproject.get("project"))
    installable = "project" in pyproject or "build-system" in pyproject \
        or _has(repo, "setup.py") or _has(repo, "setup.cfg")
    requirements = [name for name in ("requirements.txt", *_REQUIREMENTS) if _has(repo, name)]
    if not (installable or requirements):
        return None
    reasons: list[str] = []
    install: list[str] = []
    installed: list[object] = []  # the requirement lists the install names
    upgrade_pip = False
    if installable:
        reasons.append("pyproject.toml" if project or "build-system" in pyproject
                       else ("setup.py" if _has(repo, "setup.py") else "setup.cfg"))
        extras = _table(project.get("optional-dependencies"))
        extra = next((name for name in _TEST_NAMES if name in extras), None)
        groups = _table(pyproject.get("dependency-groups"))
        group = next((name for name in _TEST_NAMES if name in groups), None) if not extra else None
        install.append(f"-e '.[{extra}]'" if extra else "-e .")
        if extra:
            installed.append(extras[extra])
            reasons.append(f"pyproject.toml's [project.optional-dependencies] {extra}")
        if group:
            install.append(f"--group {group}")
            installed.append(groups[group])
            upgrade_pip = True  # pip reads dependency groups from 25.1
            reasons.append(f"pyproject.toml's [dependency-groups] {group}"
                           + (" (uv.lock is uv's; pip installs the group's ranges)" if _has(repo, "uv.lock")
                              else ""))
    for name in requirements:
        install.append(f"-r {name}")
        reasons.append(name)
    pytest = _uses_pytest(repo, pyproject)
    test = None
    if pytest:
        test = ".venv/bin/python -m pytest -q"
        reasons.append(pytest)
        if not _names_pytest(repo, installed, requirements):
            install.append("pytest")
    setup = ["python3 -m venv .venv"]
    if upgrade_pip:
        setup.append(".venv/bin/pip install --quiet --upgrade pip")
    setup.append(".venv/bin/pip install --quiet " + " ".join(install))
    return _detected(setup, test, "pip", reasons)


def _uses_pytest(repo: Path, pyproject: dict[str, Any]) -> str | None:
    """Why the tests are pytest's, or None."""
    if "pytest" in _table(pyproject.get("tool")):
        return "pyproject.toml's [tool.pytest…]"
    for name, marker in (("pytest.ini", ""), ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]"),
                         ("conftest.py", "")):
        if _has(repo, name) and (not marker or marker in _text(repo, name)):
            return name + (f"'s {marker}" if marker else "")
    for folder in ("tests", "test"):
        if _has_tests(repo, folder):
            return f"a {folder}/ folder of test files"
    return None


_PYTEST = re.compile(r"pytest(?![\w.-])", re.IGNORECASE)  # the name, not pytest-cov or pytest_mock


def _names_pytest(repo: Path, installed: list[object], requirements: list[str]) -> bool:
    """Whether what setup installs already names pytest: a requirement (not a comment) of the extra or
    group installed, or of a requirement file."""
    wanted = [str(item) for listed in installed if isinstance(listed, list) for item in listed]
    for name in requirements:
        wanted += [line.split("#", 1)[0] for line in _text(repo, name).splitlines()]
    return any(_PYTEST.match(item.strip()) for item in wanted)


def _table(value: object) -> dict[str, Any]:
    """``value`` if it is a table, else an empty one: a manifest of odd shape says nothing."""
    return value if isinstance(value, dict) else {}


# ------------------------------------------------------------------ Node


def _node(repo: Path) -> Detected | None:
    try:
        manifest = json.loads(_text(repo, "package.json")) if _has(repo, "package.json") else None
    except (ValueError, RecursionError):  # malformed, or nested past the parser's depth
        manifest = None
    if not isinstance(manifest, dict):
        return None
    reasons = ["package.json"]
    lock = next((name for name in ("package-lock.json", "npm-shrinkwrap.json") if _has(repo, name)), None)
    if lock:
        setup = ["npm ci --no-audit --no-fund"]
        reasons.append(lock)
    else:
        setup = ["npm install --no-audit --no-fund"]
        other = next((name for name in ("pnpm-lock.yaml", "yarn.lock") if _has(repo, name)), None)
        if other:
            reasons.append(f"{other} (read by its own tool; npm installs package.json's ranges)")
    scripts = manifest.get("scripts")
    script = scripts.get("test") if isinstance(scripts, dict) else None
    test = None
    if isinstance(script, str) and script.strip() and _NPM_STUB not in script:
        test = "npm test"
        reasons.append("package.json's test script")
    return _detected(setup, test, "npm", reasons)


# ------------------------------------------------------------------ the file


def _detected(setup: list[str], test: str | None, registry: str, reasons: list[str]) -> Detected:
    lines = ["# Detected by errand from this repository's files; edit it to say otherwise.",
             *(f"# - {reason}" for reason in reasons), "", "[setup]", "commands = ["]
    lines += [f"    {_quoted(command)}," for command in setup]
    lines += ["]", f'network = {{ registries = ["{registry}"] }}']
    if test:
        lines += ["", "[test]", f"command = {_quoted(test)}"]
    return Detected("\n".join(lines) + "\n", tuple(reasons), tuple(setup), test)


def _quoted(text: str) -> str:
    return json.dumps(text)  # a JSON string of printable ASCII is a TOML basic string


def _read(repo: Path, name: str, limit: int = _MAX_MANIFEST) -> bytes | None:
    """``name``'s bytes as errand.toml is read: a regular file inside the repository, through no
    symlink out of it; None otherwise."""
    found = read_inside(repo, name, limit)
    return None if found is None else found[0]


def _has(repo: Path, name: str) -> bool:
    return _read(repo, name, 0) is not None


def _text(repo: Path, name: str) -> str:
    return (_read(repo, name) or b"").decode("utf-8-sig", "replace")  # npm reads a manifest past a BOM too


def _toml(repo: Path, name: str) -> dict[str, Any]:
    try:
        return tomllib.loads(_text(repo, name))
    except (tomllib.TOMLDecodeError, RecursionError):
        return {}


def _has_tests(repo: Path, folder: str) -> bool:
    """Whether ``folder`` (a real directory of the repository, not a link) holds a test file,
    looking at no more than :data:`_MAX_WALK` entries."""
    top = repo / folder
    if top.is_symlink() or not top.is_dir():
        return False
    seen = 0
    for _, dirs, files in os.walk(top):  # never follows a link
        if any((name.startswith("test_") and name.endswith(".py")) or name.endswith("_test.py") for name in files):
            return True
        seen += len(dirs) + len(files)
        if seen > _MAX_WALK:
            return False
    return False
