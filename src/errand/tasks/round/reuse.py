"""Reusing a set-up environment across commits: what it is keyed on, and the refresh each commit gets.

An environment is what the ecosystem's lockfiles and manifests say to install.
:func:`key_files` finds those a repository has (at its root: ``package-lock.json``,
``uv.lock``, ``requirements*.txt``, ``Cargo.lock``, …) and :func:`key_material`
gives the part of each that decides the install: a lockfile whole, but of a
``pyproject.toml`` or ``package.json`` only its dependency tables, so a version
bump or a tool table's change (``[tool.ruff]``) leaves the environment as it is.

A new commit of a known repository then starts from the cached environment and
gets a cheap :func:`refresh` over it: for a Python project its installer's
editable reinstall without dependencies (``pip install --no-deps -e .``, which
also makes the build backend write ``_version.py`` for this commit), for an npm,
pnpm or yarn project its ``build`` script. So that the reinstall needs no
network, setup :func:`prime`\\ s the environment once with the build backend's
requirements, in a directory of their own outside the project's virtualenv.

A build script that is a lone ``tsc`` call (npm, TypeScript from the lockfile)
runs incrementally, its build info kept outside the tree in the environment: the
setup's build records what each source compiled to, and a commit's refresh
type-checks and emits only what changed (less than half the CPU of a full
``tsc`` on a small project; most of it is checking the standard library's
declarations again). The output is what a full build writes.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from errand._files import read_inside

__all__ = ["BUILD_DEPS", "DEPENDENCY_TABLES", "KEY_PATTERNS", "TSC_BUILD_INFO", "Refresh", "key_files", "key_material",
           "named_files", "prime", "refresh"]

# Looked for at the repository root (globs, matched by Path.glob): what an install reads.
KEY_PATTERNS: tuple[str, ...] = (
    "requirements*.txt", "requirements/*.txt", "constraints*.txt", "poetry.lock", "uv.lock", "pdm.lock",
    "Pipfile", "Pipfile.lock", "pyproject.toml", "setup.py", "setup.cfg",
    "package.json", "package-lock.json", "npm-shrinkwrap.json", "pnpm-lock.yaml", "pnpm-workspace.yaml",
    "yarn.lock", ".npmrc", ".yarnrc.yml", "Cargo.toml", "Cargo.lock", "go.mod", "go.sum", "Gemfile", "Gemfile.lock",
)
# Of these manifests only the tables that decide what is installed count (dotted paths).
DEPENDENCY_TABLES: dict[str, tuple[str, ...]] = {
    "pyproject.toml": (
        "build-system", "project.name", "project.dependencies", "project.optional-dependencies",
        "project.requires-python", "dependency-groups", "tool.poetry.dependencies", "tool.poetry.dev-dependencies",
        "tool.poetry.group", "tool.poetry.extras", "tool.poetry.source", "tool.uv", "tool.pdm.dev-dependencies",
    ),
    "package.json": (
        "dependencies", "devDependencies", "optionalDependencies", "peerDependencies", "bundleDependencies",
        "bundledDependencies", "overrides", "resolutions", "pnpm", "workspaces", "engines", "packageManager",
        "scripts.preinstall", "scripts.install", "scripts.postinstall", "scripts.prepare",
    ),
    "Cargo.toml": (
        "dependencies", "dev-dependencies", "build-dependencies", "target", "workspace", "patch", "replace",
    ),
}
_REQUIREMENTS = re.compile(r"[\w.-]+\.(?:txt|in|lock)")  # read for -r and -c: pip's files, however named
_MAX_NAMED = 64  # files named by setup, includes followed: enough for any real setup, bounded for a crafted one
_MAX_REQUIREMENTS = 1 << 20  # a requirements file read for its includes, at most
_MAX_CHECKED = 10_000  # words looked up as files, at most (a crafted file can name a million)
BUILD_DEPS = "/opt/errand-build"  # where prime puts the build backend's requirements
# Where an incremental tsc keeps what it built: outside the tree, so in the environment's image.
TSC_BUILD_INFO = f"{BUILD_DEPS}/tsc.tsbuildinfo"
_TSC_BIN = "node_modules/.bin/tsc"
_TSC_MODES = frozenset({"-b", "--build", "-w", "--watch", "--init", "--showConfig", "-v", "--version", "-h", "--help"})
_PLAIN = re.compile(r"[\w./:=@,+-]+(?: +[\w./:=@,+-]+)*")  # words a shell passes as they are: no quotes, no operators
_SEPARATORS = re.compile(r"&&|\|\||;|\n")
_PIP = re.compile(r"(?:.*/)?pip(?:3(?:\.\d+)?)?")
_PYTHON = re.compile(r"(?:.*/)?python(?:3(?:\.\d+)?)?")
_PROJECT = re.compile(r"\.(?:/)?(?:\[[\w,\s-]*\])?")  # `.`, `./`, `.[dev]`
# Asks the build backend what an editable build needs beyond [build-system] requires (hatchling: editables).
_EDITABLE_REQUIRES = (
    "import importlib, sys, tomllib\n"
    "b = tomllib.load(open('pyproject.toml', 'rb')).get('build-system', {})\n"
    "sys.path[:0] = [*b.get('backend-path', [])]\n"
    "m, _, o = b.get('build-backend', 'setuptools.build_meta:__legacy__').partition(':')\n"
    "x = importlib.import_module(m)\n"
    "for a in filter(None, o.split('.')): x = getattr(x, a)\n"
    "print('\\n'.join(getattr(x, 'get_requires_for_build_editable', lambda c=None: [])(None)))\n"
)


def key_files(repo: Path, patterns: Sequence[str] = KEY_PATTERNS) -> list[str]:
    """The files (relative, sorted) ``patterns`` match in ``repo``, outside ``.git``."""
    root = Path(repo)
    return sorted({path.relative_to(root).as_posix() for pattern in patterns for path in root.glob(pattern)
                   if ".git" not in path.relative_to(root).parts})


def named_files(repo: Path, commands: Iterable[str]) -> list[str]:
    """The files (relative, sorted) of ``repo`` that setup's ``commands`` name — ``pip install -r
    requirements-dev.lock``, ``sh scripts/bootstrap.sh`` — and the files those requirement files
    include (``-r``, ``-c``), however they are named: what setup reads, as the patterns cannot know."""
    root = Path(repo).resolve()
    found: set[str] = set()
    pending = [(word, root / folder) for command in commands for word, folder in _words(command)]
    tried: set[tuple[str, Path]] = set()
    while pending and len(found) < _MAX_NAMED and len(tried) < _MAX_CHECKED:
        word, here = pending.pop()
        if (word, here) in tried:
            continue
        tried.add((word, here))
        name = _inside(root, here, word)
        if name is None or name in found:
            continue
        found.add(name)
        read = read_inside(root, name, _MAX_REQUIREMENTS) if _REQUIREMENTS.fullmatch(Path(name).name) else None
        if read is not None:
            lines = read[0].decode(errors="replace").splitlines()
            pending += [(included, (root / name).parent) for line in lines if (included := _included(line))]
    return sorted(found)


def _words(command: str) -> list[tuple[str, str]]:
    """The words of a shell command that may name a file (arguments, ``--opt=value``'s value), each
    with the directory it is read from: ``cd server && pip install -r dev.lock`` reads server/dev.lock."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # an unclosed quote: the shell refuses it too
        return []
    named: list[tuple[str, str]] = []
    folder = ""
    for before, word in zip(["", *words], words, strict=False):
        if before == "cd":  # where later words are read from, as far as it can be told; else the root
            moved = posixpath.normpath(posixpath.join(folder, word)) if _plain_path(word) else ".."
            folder = "" if moved == "." or moved.startswith("..") else moved
            continue
        if word in ("(", ")"):  # a subshell's cd ends with it: the root again
            folder = ""
        if word.startswith("--") and "=" in word:
            word = word.split("=", 1)[1]
        elif word[:2] in ("-r", "-c") and len(word) > 2:  # pip's -rrequirements.txt
            word = word[2:]
        if _plain_path(word):
            # From the root as well: where the cd cannot be followed, a file is still found there.
            named += [(word, folder), (word, "")] if folder else [(word, "")]
    return named


def _plain_path(word: str) -> bool:
    """Whether ``word`` can be a file's path as it is: no option, variable, glob, URL or operator."""
    return bool(word) and not word.startswith("-") and "://" not in word and not set(word) & set("$*?[`~<>|;&()")


def _included(line: str) -> str | None:
    """The file a requirements file's line includes (``-r x``, ``--requirement x``, ``-c x``,
    ``--constraint=x``), if it is a plain path; else None."""
    words = line.split("#", 1)[0].split()
    if not words:
        return None
    flag, _, value = words[0].partition("=")
    if words[0] in ("-r", "-c", "--requirement", "--constraint") and len(words) > 1:
        value = words[1]
    elif flag not in ("--requirement", "--constraint"):
        value = words[0][2:] if words[0][:2] in ("-r", "-c") else ""
    return value if _plain_path(value) else None


def _inside(root: Path, here: Path, word: str) -> str | None:
    """``word`` as a regular file inside ``root`` (read from ``here``), relative; else None."""
    try:
        path = (here / word).resolve()
        name = path.relative_to(root).as_posix()
        if ".git" in Path(name).parts or not path.is_file():
            return None
    except (OSError, ValueError, RuntimeError):  # outside the repository, a loop, a name too long
        return None
    return name


def key_material(repo: Path, name: str, *, whole: bool = False) -> bytes | None:
    """What of ``name`` decides the environment: a manifest's dependency tables (as canonical
    JSON; ``whole``: the manifest whole too), any other file whole; None if it is not a
    regular file inside the repository."""
    read = read_inside(Path(repo), name, None)
    if read is None:
        return None
    data = read[0]
    tables = DEPENDENCY_TABLES.get(name)
    if tables is None or whole:
        return data
    try:
        document = tomllib.loads(data.decode()) if name.endswith(".toml") else json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):  # nested past the parser's depth: unreadable
        return data  # unreadable as a manifest: any change to it counts
    if not isinstance(document, dict):
        return data
    chosen = {table: _dotted(document, table) for table in tables}
    return json.dumps(chosen, sort_keys=True).encode()


def _dotted(document: dict[str, Any], path: str) -> Any:
    value: Any = document
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


# ----------------------------------------------------------------- the refresh


@dataclass(frozen=True)
class _Installer:
    """The command that installed the project itself in setup: ``pip`` (its words), editable or not."""

    pip: tuple[str, ...]
    editable: bool
    isolated: bool = True  # False: setup built it with --no-build-isolation (its backend is installed)

    @property
    def python(self) -> tuple[str, ...] | None:
        """The interpreter that pip runs under (the build backend's), or None for ``uv pip``."""
        if self.pip[-2:] == ("-m", "pip"):
            return self.pip[:-2]
        if len(self.pip) == 1:
            head, _, _name = self.pip[0].rpartition("/")
            return (f"{head}/python" if head else "python3",)
        return None


def _installer(setup: Iterable[str]) -> _Installer | None:
    """The pip that installs the repository's own project (``pip install -e .``, ``.venv/bin/pip
    install .``, ``python3 -m pip install -e .[dev]``, ``uv pip install -e .``), if setup has one."""
    for command in setup:
        for segment in _SEPARATORS.split(command):
            try:
                words = shlex.split(segment)
            except ValueError:
                continue
            found = _pip_words(words)
            if found is None:
                continue
            pip, rest = found
            isolated = "--no-build-isolation" not in rest
            for index, word in enumerate(rest):
                if word in ("-e", "--editable") and index + 1 < len(rest) and _PROJECT.fullmatch(rest[index + 1]):
                    return _Installer(pip, True, isolated)
                if word.startswith("-e") and _PROJECT.fullmatch(word[2:]):
                    return _Installer(pip, True, isolated)
                if _PROJECT.fullmatch(word) and (index == 0 or rest[index - 1] not in ("-r", "-c", "-t", "--target")):
                    return _Installer(pip, False, isolated)
    return None


def _pip_words(words: list[str]) -> tuple[tuple[str, ...], list[str]] | None:
    """``(the pip, the arguments after install)`` of a pip install command's words."""
    for start in range(len(words)):
        word = words[start]
        if _PIP.fullmatch(word) and words[start + 1:start + 2] == ["install"]:
            return tuple(words[:start + 1][-1:]), words[start + 2:]
        if (_PYTHON.fullmatch(word) and words[start + 1:start + 4] == ["-m", "pip", "install"]):
            return (word, "-m", "pip"), words[start + 4:]
        if word.endswith("uv") and words[start + 1:start + 3] == ["pip", "install"]:
            return (word, "pip"), words[start + 3:]
    return None


@dataclass(frozen=True)
class Refresh:
    """What runs over a cached environment for a commit: ``commands`` (in order), and what they are."""

    commands: tuple[str, ...] = ()
    why: tuple[str, ...] = ()  # for a person: "python: editable reinstall", "npm: the build script"


def prime(repo: Path, setup: Sequence[str]) -> tuple[str, ...]:
    """Commands setup runs last, so that :func:`refresh`'s reinstall needs no network: the
    build backend's requirements (and those of an editable build) into :data:`BUILD_DEPS`."""
    installer = _installer(setup)
    if installer is None or installer.python is None or not installer.isolated:
        return ()
    pip, python = _shell(installer.pip), _shell(installer.python)
    requires = _build_requires(repo)
    target = f"--quiet --disable-pip-version-check --target {BUILD_DEPS}"
    first = f"{pip} install {target} {' '.join(map(shlex.quote, requires))}"
    editable = (f"PYTHONPATH={BUILD_DEPS} {python} -c {shlex.quote(_EDITABLE_REQUIRES)} > /tmp/errand-editable.txt"
                f" && {{ ! [ -s /tmp/errand-editable.txt ] || {pip} install {target} --upgrade"
                f" -r /tmp/errand-editable.txt; }}")
    return (first, editable) if installer.editable else (first,)


def refresh(repo: Path, setup: Sequence[str], *, primed: bool) -> Refresh:
    """The refresh for the commit checked out at ``repo``, given the setup commands and
    whether :func:`prime` succeeded (else the reinstall builds in isolation, as pip would)."""
    commands: list[str] = []
    why: list[str] = []
    installer = _installer(setup)
    if installer is not None:
        words = [*installer.pip, "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
        primed = primed and installer.python is not None and installer.isolated
        if primed or not installer.isolated:  # the backend is at hand: no index, no isolated build
            words += ["--no-index", "--no-build-isolation"]
        words += ["-e", "."] if installer.editable else ["."]
        prefix = f"PYTHONPATH={BUILD_DEPS} " if primed else ""
        commands.append(prefix + _shell(words))
        why.append("python: " + ("an editable reinstall" if installer.editable else "a reinstall")
                   + " without dependencies")
    build = _node_build(repo, setup)
    if build is not None:
        commands.append(build)
        why.append("node: the project's build script" + (", incremental" if build.startswith(_TSC_BIN) else ""))
    return Refresh(tuple(commands), tuple(why))


def _node_build(repo: Path, setup: Sequence[str]) -> str | None:
    """The package manager's ``run build``, if setup uses one and package.json has a build
    script; a lone ``tsc`` call of npm's run incrementally (:func:`_incremental_tsc`)."""
    scripts = _json_object(repo, "package.json").get("scripts")
    if not isinstance(scripts, dict) or not isinstance(scripts.get("build"), str):
        return None
    words = {word for command in setup for segment in _SEPARATORS.split(command) for word in segment.split()}
    for manager in ("pnpm", "yarn", "npm"):
        if manager in words:
            incremental = _incremental_tsc(repo, scripts) if manager == "npm" else None
            return incremental or f"{manager} run build"
    return None


def _incremental_tsc(repo: Path, scripts: dict[str, Any]) -> str | None:
    """``scripts.build`` as an incremental ``tsc`` run straight from ``node_modules/.bin``, its
    build info in :data:`TSC_BUILD_INFO`; None unless the script is one plain ``tsc`` call
    (no shell, no ``--build`` or watch mode), npm would run no ``prebuild``/``postbuild``
    around it, and package-lock.json installs a TypeScript that knows ``--tsBuildInfoFile``
    (3.4) at the root of node_modules."""
    script = scripts["build"]
    if "prebuild" in scripts or "postbuild" in scripts or not _PLAIN.fullmatch(script):
        return None
    words = script.split()
    if words[0] != "tsc" or _TSC_MODES.intersection(words):
        return None
    packages = _json_object(repo, "package-lock.json").get("packages")
    typescript = packages.get("node_modules/typescript") if isinstance(packages, dict) else None
    version = typescript.get("version") if isinstance(typescript, dict) else None
    found = re.match(r"(\d+)\.(\d+)\.", version) if isinstance(version, str) else None
    if found is None or (int(found[1]), int(found[2])) < (3, 4):
        return None
    added = [] if "--incremental" in words else ["--incremental"]
    if not any(word.startswith("--tsBuildInfoFile") for word in words):
        added += ["--tsBuildInfoFile", TSC_BUILD_INFO]
    return _shell([_TSC_BIN, *words[1:], *added])


def _json_object(repo: Path, name: str) -> dict[str, Any]:
    """The JSON object in ``repo/name`` (at most 64 MiB), or an empty one if it is not there or not one."""
    material = read_inside(Path(repo), name, 64 * 1024**2)
    if material is None or material[1]:
        return {}
    try:
        document = json.loads(material[0])
    except (ValueError, RecursionError):
        return {}
    return document if isinstance(document, dict) else {}


def _build_requires(repo: Path) -> list[str]:
    """``[build-system] requires`` of the project, or what pip assumes without one."""
    material = read_inside(Path(repo), "pyproject.toml", 1024**2)
    default = ["setuptools>=40.8.0", "wheel"]
    if material is None:
        return default
    try:
        system = tomllib.loads(material[0].decode()).get("build-system", {})
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return default
    requires = system.get("requires") if isinstance(system, dict) else None
    if not isinstance(requires, list) or not all(isinstance(item, str) for item in requires):
        return default
    return list(requires) or default


def _shell(words: Sequence[str]) -> str:
    return " ".join(shlex.quote(word) for word in words)
