"""SWE-bench-format instances mined from a repository's own fix commits (``errand eval mine``).

A fix commit becomes an instance whose base is its first parent. Its diff is split
by path: the parts that touch test files are the ``test_patch``, the rest the gold
``patch``. The test files then run twice in errand's sandboxes, over copies of the
base stripped of later history: once with the test patch alone, once with both.
A test that does not pass without the fix and passes with it is ``FAIL_TO_PASS``;
one that passes both times is ``PASS_TO_PASS``. A commit with no test change, no
code change, or no test that the fix turns from failing to passing is skipped, with
the reason. The problem statement is the commit message unless one is given.

Each instance carries its repository's setup and test commands (an ``errand`` table:
from the specs file, else the base commit's ``errand.toml``) and its source, so the
file it is written to validates and runs as it is.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from errand import _settings
from errand.errors import ErrandError
from errand.eval.dataset import Instance, RepoSpec, load_specs
from errand.eval.errors import EvalError
from errand.eval.grading import GradeOptions, TestRun, run_test_files
from errand.eval.junit import Outcome
from errand.eval.patches import split_patch
from errand.repo import WorkingCopy
from errand.repo.errors import RepoError
from errand.repo.git import run_git
from errand.tasks.evidence import is_test_file
from errand.tasks.round.environment import Environment

__all__ = ["MineOptions", "Mined", "expand_commits", "mine", "runnable_tests", "split_fix", "test_ids",
           "write_dataset"]

_RUNNER_FILES = frozenset({"conftest.py", "__init__.py"})


@dataclass(frozen=True)
class MineOptions:
    name: str | None = None  # the instances' repo ("owner/name"); default: the directory's name
    specs: Path | None = None
    statements: Mapping[str, str] = field(default_factory=dict)  # commit (any form git reads) -> text
    grading: GradeOptions = field(default_factory=GradeOptions)
    concurrency: int = 1


@dataclass(frozen=True)
class Mined:
    """One commit's outcome: the instance made of it, or why none was."""

    commit: str
    record: dict[str, Any] | None = None
    skipped: str | None = None


def split_fix(diff: str) -> tuple[str, str]:
    """``(code patch, test patch)`` of a commit's diff: a file part goes to the tests when any
    path it touches is a test file."""
    code: list[str] = []
    tests: list[str] = []
    for part in split_patch(diff):
        (tests if any(is_test_file(path) for path in part.paths) else code).append(part.text)
    return "".join(code), "".join(tests)


def runnable_tests(test_patch: str) -> tuple[str, ...]:
    """The Python test modules the test patch leaves in the tree (not conftest.py, not deleted)."""
    found = []
    for part in split_patch(test_patch):
        if "\n+++ /dev/null" in part.text:
            continue
        found += [path for path in sorted(part.paths) if path.endswith(".py") and is_test_file(path)
                  and Path(path).name not in _RUNNER_FILES]
    return tuple(dict.fromkeys(found))


def test_ids(cases: Mapping[tuple[str, str], Outcome], files: Sequence[str]) -> dict[str, Outcome]:
    """SWE-bench test ids (``path::Class::name``) of the report's cases that belong to ``files``."""
    modules = sorted(((file.removesuffix(".py").replace("/", "."), file) for file in files), reverse=True)
    named: dict[str, Outcome] = {}
    for (classname, name), outcome in cases.items():
        for module, file in modules:
            if classname == module or classname.startswith(module + "."):
                classes = classname[len(module):].lstrip(".")
                named["::".join([file, *(classes.split(".") if classes else []), name])] = outcome
                break
    return named


test_ids.__test__ = False  # type: ignore[attr-defined]  # not a pytest test, whatever its name


async def mine(repo: Path, commits: Sequence[str], options: MineOptions | None = None,
               progress: Callable[[Mined], None] | None = None) -> list[Mined]:
    """An instance (or the reason for none) for every commit, in the order given."""
    options = options or MineOptions()
    repo = Path(repo).resolve()
    if not (repo / ".git").exists() and not (repo / "HEAD").is_file():
        raise EvalError(f"{repo} is not a git repository (clone it first)", code="eval_bad_repo")
    shas = await asyncio.to_thread(expand_commits, repo, commits)
    statements = {await asyncio.to_thread(_resolve, repo, key): text for key, text in options.statements.items()}
    gate = asyncio.Semaphore(options.concurrency)

    async def one(sha: str) -> Mined:
        async with gate:
            try:
                mined = await _mine_one(repo, sha, options, statements.get(sha))
            except ErrandError as error:
                mined = Mined(sha, skipped=f"{error.code}: {error.message}")
        if progress:
            progress(mined)
        return mined

    return list(await asyncio.gather(*(one(sha) for sha in shas)))


def expand_commits(repo: Path, commits: Sequence[str]) -> list[str]:
    """Full ids of the commits named; a range (``A..B``) is its non-merge commits, oldest first."""
    shas: list[str] = []
    for given in commits:
        if ".." in given:
            listed = _git(repo, "rev-list", "--reverse", "--no-merges", "--end-of-options", given, what=given).split()
            shas += listed
        else:
            shas.append(_resolve(repo, given))
    return list(dict.fromkeys(shas))


def _resolve(repo: Path, commit: str) -> str:
    return _git(repo, "rev-parse", "--verify", "--end-of-options", f"{commit}^{{commit}}", what=commit).strip()


def _git(repo: Path, *args: str, what: str) -> str:
    try:
        return run_git(list(args), repo)
    except RepoError as error:
        raise EvalError(f"{repo}: cannot read {what}: {error.stderr or error.message}",
                        code="eval_no_commit") from None


async def _mine_one(repo: Path, sha: str, options: MineOptions, statement: str | None) -> Mined:
    parents = _git(repo, "rev-list", "--parents", "-n", "1", sha, what=sha).split()[1:]
    if not parents:
        return Mined(sha, skipped="a root commit: no base to start from")
    base = parents[0]
    diff = _git(repo, "diff", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", "--binary",
                "--full-index", base, sha, what=sha)
    code, tests = split_fix(diff)
    files = runnable_tests(tests)
    if not code.strip():
        return Mined(sha, skipped="changes only tests")
    if not files:
        return Mined(sha, skipped="adds or changes no test module")
    name = options.name or repo.name
    spec = await asyncio.to_thread(_spec, repo, base, name, options.specs)
    message = _git(repo, "log", "-1", "--format=%B", sha, what=sha).strip()
    instance = Instance(instance_id=f"{name.replace('/', '__')}-{sha[:12]}", repo=name, base_commit=base,
                        problem_statement=statement or message, patch=code, test_patch=tests,
                        fail_to_pass=files, pass_to_pass=(), spec=spec, source=str(repo))
    before = await run_test_files(instance, [tests], options.grading)
    after = await run_test_files(instance, [code, tests], options.grading)
    return _verdict(instance, sha, files, before, after, _git(repo, "show", "-s", "--format=%cI", sha, what=sha))


def _verdict(instance: Instance, sha: str, files: tuple[str, ...], before: TestRun, after: TestRun,
             created: str) -> Mined:
    was, now = test_ids(before.cases, files), test_ids(after.cases, files)
    fail_to_pass = sorted(test for test, outcome in now.items() if outcome == "passed" and was.get(test) != "passed")
    pass_to_pass = sorted(test for test, outcome in now.items() if outcome == "passed" and was.get(test) == "passed")
    if not now:
        return Mined(sha, skipped=f"the tests reported nothing with the fix (exit {after.exit_code}): "
                                  f"{after.output[-300:].strip()}")
    if not fail_to_pass:
        return Mined(sha, skipped="no test fails without the fix and passes with it")
    spec = instance.spec
    errand: dict[str, Any] = {"source": instance.source, "setup": list(spec.setup), "test": spec.test,
                              "setup_registries": list(spec.setup_registries), "network": spec.network}
    if spec.setup_key is not None:
        errand["setup_key"] = list(spec.setup_key)
    return Mined(sha, record={
        "instance_id": instance.instance_id, "repo": instance.repo, "base_commit": instance.base_commit,
        "problem_statement": instance.problem_statement, "hints_text": "", "created_at": created,
        "patch": instance.patch, "test_patch": instance.test_patch, "version": "",
        "environment_setup_commit": instance.base_commit,
        "FAIL_TO_PASS": json.dumps(fail_to_pass), "PASS_TO_PASS": json.dumps(pass_to_pass), "errand": errand,
    })


def _spec(repo: Path, base: str, name: str, specs: Path | None) -> RepoSpec:
    """The specs file's table for the repository, else the setup and test of the base's errand.toml."""
    table = load_specs(specs)
    if name in table:
        spec = table[name]
    else:
        tree, _commit = WorkingCopy.pristine(repo, base, owner=_settings.sandbox_uid())
        environment = Environment.load(tree)
        spec = RepoSpec(setup=environment.setup, test=environment.test,
                        setup_registries=environment.setup_registries, setup_key=environment.setup_key,
                        network="open" if environment.network.mode == "open" else "none")
    if spec.test is None:
        raise EvalError(f"no test command for {name}: give one in a specs file ([repos.\"{name}\"] test = ...) or "
                        "in the repository's errand.toml ([test] command)", code="eval_no_spec")
    return spec


def write_dataset(path: Path, mined: Sequence[Mined]) -> int:
    """Write the instances mined as JSON lines; how many."""
    records = [item.record for item in mined if item.record is not None]
    Path(path).write_text("".join(json.dumps(record) + "\n" for record in records))
    return len(records)
