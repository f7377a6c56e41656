"""SWE-bench-format datasets, and what errand needs beside them to build an environment.

An instance is SWE-bench's record (``instance_id, repo, base_commit,
problem_statement, patch, test_patch, FAIL_TO_PASS, PASS_TO_PASS``) read from
JSON (a list) or JSONL; the test lists may be lists or JSON strings of lists,
as the published datasets carry them. Where a Docker harness has an image per
repository, errand has a :class:`RepoSpec`: where the repository comes from and
its setup and test commands. It is read from a specs file (TOML,
``[repos."owner/name"]`` tables), or from the instance itself (an ``errand``
table with the same keys, which wins). A repository comes from the spec's
``source`` (a git URL or a path, relative to the specs file), else from a
mirror directory holding ``owner__name`` or ``name``.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from errand.eval.errors import EvalError
from errand.repo.workcopy import is_url
from errand.sandbox.network import Network
from errand.sandbox.registries import REGISTRY_KINDS
from errand.tasks.round.environment import Environment

__all__ = ["Dataset", "Instance", "RepoSpec", "load_dataset", "load_specs"]

_REQUIRED = ("instance_id", "repo", "base_commit", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")
_SPEC_KEYS = ("source", "setup", "test", "setup_registries", "setup_key", "network")


@dataclass(frozen=True)
class RepoSpec:
    """How to build and test one repository (or one instance of it)."""

    source: str | None = None
    setup: tuple[str, ...] = ()
    test: str | None = None
    setup_registries: tuple[str, ...] = ()
    setup_key: tuple[str, ...] | None = None  # globs setup's cache is keyed on; None: the whole tree
    network: str = "none"  # egress of the test run: "none" or "open"

    def environment(self) -> Environment:
        """The task layer's environment for it: the test run has no network unless asked."""
        network = Network.open() if self.network == "open" else Network.none()
        return Environment(setup=self.setup, test=self.test, network=network,
                           setup_network=Network.none() if self.setup_registries else None,
                           setup_registries=self.setup_registries, setup_key=self.setup_key)

    def merged(self, other: Mapping[str, Any], where: str) -> RepoSpec:
        values = {**self.__dict__, **_spec_values(other, where)}
        return RepoSpec(**values)


@dataclass(frozen=True)
class Instance:
    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str
    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    spec: RepoSpec
    source: str  # where the repository is cloned from: a URL or an absolute path
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def test_files(self) -> tuple[str, ...]:
        """The test files the lists name, in first-seen order (what the test run is given)."""
        files = [name.split("::", 1)[0] for name in (*self.fail_to_pass, *self.pass_to_pass)]
        return tuple(dict.fromkeys(name for name in files if name))


@dataclass(frozen=True)
class Dataset:
    path: Path
    instances: tuple[Instance, ...]

    def __len__(self) -> int:
        return len(self.instances)

    def get(self, instance_id: str) -> Instance:
        for instance in self.instances:
            if instance.instance_id == instance_id:
                return instance
        raise EvalError(f"{self.path}: no instance {instance_id!r}", code="eval_unknown_instance")

    @property
    def repos(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(instance.repo for instance in self.instances))


def load_specs(path: Path | None) -> dict[str, RepoSpec]:
    """The ``[repos."owner/name"]`` tables of a specs file, sources made absolute."""
    if path is None:
        return {}
    try:
        document = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise EvalError(f"cannot read the specs file {path}: {error}", code="eval_bad_specs") from None
    unknown = sorted(set(document) - {"repos"})
    repos = document.get("repos", {})
    if unknown or not isinstance(repos, dict):
        raise EvalError(f"{path}: a specs file holds only [repos.\"owner/name\"] tables", code="eval_bad_specs")
    specs = {}
    for name, table in repos.items():
        if not isinstance(table, dict):
            raise EvalError(f"{path}: repos.{name} must be a table", code="eval_bad_specs")
        spec = RepoSpec().merged(table, f"{path}: repos.{name!r}")
        if spec.source is not None and not is_url(spec.source):
            spec = RepoSpec(**{**spec.__dict__, "source": str((Path(path).parent / spec.source).resolve())})
        specs[name] = spec
    return specs


def load_dataset(path: Path, *, specs: Path | None = None, mirror: Path | None = None,
                 only: Sequence[str] = ()) -> Dataset:
    """The instances of a JSON or JSONL file (those named in ``only``, if given), each with
    its spec and source resolved; an instance whose repository has neither is refused."""
    path = Path(path)
    records = _records(path)
    table = load_specs(specs)
    instances = [_instance(record, f"{path}: record {n}", table, mirror) for n, record in enumerate(records, 1)]
    seen: set[str] = set()
    for instance in instances:
        if instance.instance_id in seen:
            raise EvalError(f"{path}: instance {instance.instance_id!r} appears twice", code="eval_bad_dataset")
        seen.add(instance.instance_id)
    if only:
        missing = sorted(set(only) - seen)
        if missing:
            raise EvalError(f"{path}: no instance {', '.join(map(repr, missing))}", code="eval_unknown_instance")
        instances = [instance for instance in instances if instance.instance_id in set(only)]
    return Dataset(path, tuple(instances))


def _records(path: Path) -> list[Mapping[str, Any]]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise EvalError(f"cannot read the dataset {path}: {error}", code="eval_bad_dataset") from None
    try:
        if text.lstrip().startswith("["):
            loaded = json.loads(text)
        else:
            loaded = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as error:
        raise EvalError(f"{path}: not JSON or JSON lines: {error}", code="eval_bad_dataset") from None
    if not isinstance(loaded, list) or not all(isinstance(item, dict) for item in loaded):
        raise EvalError(f"{path}: expected a list of instance objects", code="eval_bad_dataset")
    if not loaded:
        raise EvalError(f"{path} holds no instances", code="eval_bad_dataset")
    return loaded


def _instance(record: Mapping[str, Any], where: str, specs: Mapping[str, RepoSpec],
              mirror: Path | None) -> Instance:
    missing = [key for key in _REQUIRED if key not in record]
    if missing:
        raise EvalError(f"{where}: missing {', '.join(missing)}", code="eval_bad_dataset")
    for key in ("instance_id", "repo", "base_commit", "patch", "test_patch"):
        if not isinstance(record[key], str):
            raise EvalError(f"{where}: {key} must be a string", code="eval_bad_dataset")
    where = f"{where} ({record['instance_id']})"
    spec = specs.get(record["repo"], RepoSpec())
    if isinstance(record.get("errand"), dict):
        spec = spec.merged(record["errand"], f"{where}: errand")
    if spec.test is None:
        raise EvalError(f"{where}: no test command for {record['repo']} (give one in the specs file or the "
                        "instance's errand table)", code="eval_no_spec")
    return Instance(
        instance_id=record["instance_id"], repo=record["repo"], base_commit=record["base_commit"],
        problem_statement=str(record.get("problem_statement") or ""), patch=record["patch"],
        test_patch=record["test_patch"], fail_to_pass=_tests(record["FAIL_TO_PASS"], where, "FAIL_TO_PASS"),
        pass_to_pass=_tests(record["PASS_TO_PASS"], where, "PASS_TO_PASS"), spec=spec,
        source=_source(record["repo"], spec, mirror, where), raw=record)


def _tests(value: object, where: str, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError:
            raise EvalError(f"{where}: {key} is a string but not a JSON list", code="eval_bad_dataset") from None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise EvalError(f"{where}: {key} must be a list of test names", code="eval_bad_dataset")
    return tuple(value)


def _source(repo: str, spec: RepoSpec, mirror: Path | None, where: str) -> str:
    if spec.source is not None:
        return spec.source
    if mirror is not None:
        for name in (repo.replace("/", "__"), repo.rsplit("/", 1)[-1]):
            if (Path(mirror) / name).is_dir():
                return str((Path(mirror) / name).resolve())
    raise EvalError(f"{where}: no source for {repo}: give one in the specs file, or a mirror directory "
                    f"holding {repo.replace('/', '__')}", code="eval_no_source")


def _spec_values(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(table) - set(_SPEC_KEYS))
    if unknown:
        raise EvalError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                        f"(known: {', '.join(_SPEC_KEYS)})", code="eval_bad_specs")
    values: dict[str, Any] = {}
    for key in ("source", "test"):
        if key in table:
            if not isinstance(table[key], str) or not table[key].strip():
                raise EvalError(f"{where}: {key} must be a non-empty string", code="eval_bad_specs")
            values[key] = table[key]
    for key in ("setup", "setup_registries", "setup_key"):
        if key in table:
            items = table[key]
            if not isinstance(items, list) or not all(isinstance(item, str) and item.strip() for item in items):
                raise EvalError(f"{where}: {key} must be a list of strings", code="eval_bad_specs")
            values[key] = tuple(items)
    if set(values.get("setup_registries", ())) - set(REGISTRY_KINDS):
        raise EvalError(f"{where}: setup_registries: known are {', '.join(REGISTRY_KINDS)}", code="eval_bad_specs")
    for glob in values.get("setup_key", ()):
        if PurePosixPath(glob).is_absolute() or ".." in PurePosixPath(glob).parts:
            raise EvalError(f"{where}: setup_key {glob!r} must be relative, without '..'", code="eval_bad_specs")
    if "network" in table:
        if table["network"] not in ("none", "open"):
            raise EvalError(f"{where}: network must be \"none\" or \"open\"", code="eval_bad_specs")
        values["network"] = table["network"]
    return values
