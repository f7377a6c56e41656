"""Grade one candidate patch of one instance, in a way a cheat cannot pass.

* The tests run in a fresh sandbox of the instance's set-up environment, never the
  agent's, over a working copy cloned from a copy of the repository stripped of
  everything later than the base commit (:mod:`errand.eval.strip`).
* The candidate patch goes on first, without its parts that touch the files the test
  patch touches or any other test file (a helper the tests import: tests come from the
  base and the test patch alone); then the test patch.
* The test runner's configuration is the base commit's wherever it lives: the
  candidate's parts that touch it (``pyproject.toml``, ``pytest.toml``, every
  ``conftest.py``, ``*.pth``, what setup installed, … see :mod:`errand.eval.patches`)
  are not applied, and flagged. pytest runs with plugin autoload off and the base
  environment's own plugins named (:mod:`errand.eval.plugins`). One that edits test
  files is flagged. Which paths a part touches is what git writes applying it, asked of
  git (:func:`errand.eval.patches.written`): a patch git reads otherwise than errand is
  not graded (``patch_misread``).
* Outcomes are read per test from the runner's JUnit XML report, read by the host
  only after every process of the sandbox has ended; a test the report does not
  name is missing, not passed. The report is held against the exit status and
  pytest's own summary line (:mod:`errand.eval.agreement`): when they disagree the
  grade is ``inconsistent``. A non-zero exit with no failure anywhere is an error,
  not a pass.

The environment is the task layer's: :func:`errand.tasks.round.steps.set_up` runs setup
once per repository and caches it (base image → environment layer), and each
instance pays an overlay mount and a sandbox.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any, Literal

from errand._files import read_inside
from errand.errors import ErrandError
from errand.eval.agreement import NO_TESTS, disagreement
from errand.eval.context import InstanceContext
from errand.eval.dataset import Instance
from errand.eval.junit import Outcome, outcomes, parse_junit
from errand.eval.patches import (
    command_paths,
    edited_tests,
    files_of,
    misread,
    runner_path,
    without,
    without_paths,
    written,
)
from errand.eval.plugins import base_plugins, hardened
from errand.eval.strip import stripped_source
from errand.eval.summary import parse_summary
from errand.repo import WorkingCopy
from errand.repo.errors import RepoError
from errand.tasks.evidence import is_test_file
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Run, RunState, Task
from errand.tasks.round import steps

__all__ = ["Grade", "GradeOptions", "InstanceContext", "TestRun", "grade", "prepare_instance", "run_test_files"]

Status = Literal["resolved", "unresolved", "inconsistent", "error"]
JUNIT_NAME = ".errand-eval-junit.xml"
JUNIT_PATH = f"{steps.WORKSPACE}/{JUNIT_NAME}"
MAX_REPORT_BYTES = 32 * 1024**2


@dataclass(frozen=True)
class GradeOptions:
    isolation: str = "namespace"
    timeout: float = steps.CHECK_TIMEOUT


@dataclass(frozen=True)
class Grade:
    """What grading one patch found; :meth:`report` is SWE-bench's ``report.json`` for it."""

    instance_id: str
    label: str  # which patch: "gold-1", "attempt-2", "prediction"
    status: Status
    error: str | None = None  # a code: patch_failed, patch_misread, inconsistent, test_run_error, timeout, …
    failure: Literal["agent", "infrastructure"] | None = None
    detail: str = ""
    patch_exists: bool = True
    applied: bool = False
    flags: tuple[str, ...] = ()
    tests: dict[str, Outcome] = field(default_factory=dict)
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    exit_code: int | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # setup, prepare, sandbox, tests, total
    setup_cached: bool = False
    output: str = ""

    @property
    def resolved(self) -> bool:
        return self.status == "resolved"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Grade:
        fields = {**data, "flags": tuple(data.get("flags", ())), "fail_to_pass": tuple(data.get("fail_to_pass", ())),
                  "pass_to_pass": tuple(data.get("pass_to_pass", ()))}
        return cls(**fields)

    def report(self) -> dict[str, Any]:
        """SWE-bench's per-instance report, with errand's own findings under ``errand``."""
        def split(names: tuple[str, ...]) -> dict[str, list[str]]:
            return {"success": [n for n in names if self.tests.get(n) == "passed"],
                    "failure": [n for n in names if self.tests.get(n) != "passed"]}

        return {self.instance_id: {
            "patch_is_None": False, "patch_exists": self.patch_exists,
            "patch_successfully_applied": self.applied, "resolved": self.resolved,
            "tests_status": {"FAIL_TO_PASS": split(self.fail_to_pass), "PASS_TO_PASS": split(self.pass_to_pass),
                             "FAIL_TO_FAIL": {"success": [], "failure": []},
                             "PASS_TO_FAIL": {"success": [], "failure": []}},
            "errand": {key: value for key, value in self.to_json().items() if key not in ("instance_id", "output")},
        }}


def _records(instance: Instance, source: str, role: str) -> tuple[Task, Run]:
    now = time.time()
    task = Task(id=f"eval-{_slug(instance.instance_id)}", title=instance.instance_id,
                instruction=instance.problem_statement, repo=source, base_ref=instance.base_commit,
                base_commit=instance.base_commit, model=None, model_endpoint=None, attempts=1,
                state=TaskState.RUNNING, branch=None, parent_id=None, created_at=now, updated_at=now)
    run = Run(id=f"eval-{role}-{uuid.uuid4().hex[:12]}", task_id=task.id, attempt=1, round=1,
              state=RunState.RUNNING, worker="eval", started_at=now, ended_at=None, result=None)
    return task, run


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:80]


async def prepare_instance(instance: Instance, role: str, isolation: str,
                           journal: steps.Journal | None = None) -> InstanceContext:
    """Strip the source, read nothing from the agent, and set up (or reuse) the environment."""
    start = time.monotonic()
    source = await asyncio.to_thread(stripped_source, instance.source, instance.base_commit)
    task, run = _records(instance, str(source), role)
    base_tree = await asyncio.to_thread(steps.base_checkout, task)
    environment = instance.spec.environment()
    setup = await steps.set_up(environment, task, run, base_tree, journal or steps.Journal(_discard),
                               isolation=isolation, source=f"eval:{instance.repo}:{instance.source}")
    return InstanceContext(task, run, environment, setup, time.monotonic() - start, base_tree)


async def _discard(_kind: str, _data: dict[str, Any]) -> None:
    return None


async def grade(instance: Instance, patch: str, label: str, options: GradeOptions | None = None) -> Grade:
    """Grade ``patch`` against ``instance`` (see the module docstring for how)."""
    options = options or GradeOptions()
    start = time.monotonic()
    base = Grade(instance.instance_id, label, "error", fail_to_pass=instance.fail_to_pass,
                 pass_to_pass=instance.pass_to_pass, patch_exists=bool(patch.strip()))
    try:
        context = await prepare_instance(instance, "grade", options.isolation)
    except steps.SetupFailed as error:
        return _ended(base, start, error="setup_failed", failure="infrastructure",
                      detail=f"{error.message}\n{error.log[-2000:]}")
    except ErrandError as error:
        return _ended(base, start, error=error.code, failure="infrastructure", detail=error.message)
    base = _with(base, setup_cached=context.setup.cached, seconds={"setup": round(context.setup_seconds, 3)})
    try:
        return await _grade_in(instance, patch, context, base, options, start)
    finally:
        await asyncio.to_thread(steps.remove_work, context.run)


async def _grade_in(instance: Instance, patch: str, context: InstanceContext, base: Grade,
                    options: GradeOptions, start: float) -> Grade:
    began = time.monotonic()
    # The decisions below go by the paths a part writes: they must be the ones git writes.
    if await asyncio.to_thread(written, patch) is None:
        return _ended(base, start, error="patch_failed", failure="agent", detail="git does not read the patch")
    misreading = await asyncio.to_thread(misread, patch)
    if misreading is not None:
        return _ended(base, start, error="patch_misread", failure="agent", detail=misreading)
    tested = files_of(instance.test_patch)
    candidate, reset = without_paths(patch, tested)
    candidate, kept = without(candidate, _runs_tests(instance, context))
    candidate, tests_reset = without(candidate, is_test_file)
    flags = tuple([f"edits tests: {path}" for path in edited_tests(patch)]
                  + [f"reset to the base before the test patch: {path}" for path in reset]
                  + [f"kept at the base (decides how tests run): {path}" for path in kept]
                  + [f"reset to the base (tests come from the base and the test patch): {path}"
                     for path in tests_reset])
    base = _with(base, flags=flags)
    copy = await steps.prepared_copy(context.task, context.run, setup=context.setup)
    try:
        await asyncio.to_thread(copy.apply, candidate)
    except RepoError as error:
        return _ended(base, start, error="patch_failed", failure="agent", detail=error.stderr or error.message)
    base = _with(base, applied=True)
    try:
        await asyncio.to_thread(copy.apply, instance.test_patch)
    except RepoError as error:
        return _ended(base, start, error="test_patch_failed", failure="infrastructure",
                      detail=error.stderr or error.message)
    prepared = time.monotonic()
    try:
        result, report = await _run_tests(instance, context, copy, options)
    except ErrandError as error:
        return _ended(base, start, error="sandbox_error", failure="infrastructure", detail=error.message)
    cases = parse_junit(report)
    tests = outcomes(cases, (*instance.fail_to_pass, *instance.pass_to_pass))
    seconds = {**base.seconds, "prepare": round(prepared - began, 3), "tests": result.seconds,
               "sandbox": round(time.monotonic() - prepared - result.seconds, 3)}
    base = _with(base, tests=tests, exit_code=result.exit_code, seconds=seconds, output=result.output[-4000:])
    return _verdict(base, start, report, cases, result.exit_code, result.output)


def _runs_tests(instance: Instance, context: InstanceContext) -> Callable[[str], bool]:
    """Whether a path decides how the tests run: by its name, because setup wrote it, or because
    the test command names it (see :mod:`errand.eval.patches`)."""
    named = command_paths(instance.spec.test or "")
    layers, base_tree = context.setup.tree_layers, context.base_tree

    def written_by_setup(path: str) -> bool:
        if not layers or base_tree is None:
            return False
        parts = PurePosixPath(path).parts
        return any(os.path.lexists(layer.joinpath(*parts[:depth])) and not os.path.lexists(
            base_tree.joinpath(*parts[:depth])) for layer in layers for depth in range(1, len(parts) + 1))

    return lambda path: runner_path(path) or path in named or written_by_setup(path)


def _verdict(base: Grade, start: float, report: bytes, cases: dict[tuple[str, str], Outcome],
             exit_code: int | None, output: str) -> Grade:
    if exit_code is None:
        return _ended(base, start, error="timeout", failure="agent", detail="the test command ran past its timeout")
    if not report:
        return _ended(base, start, error="test_run_error", failure="agent",
                      detail=f"the test command exited with {exit_code} and wrote no report")
    summary = parse_summary(output)
    failures = any(outcome in ("failed", "error") for outcome in cases.values()) or bool(summary and summary.bad)
    if exit_code not in (0, NO_TESTS) and not failures:
        return _ended(base, start, error="test_run_error", failure="agent",
                      detail=f"the test command exited with {exit_code} and reported no failure")
    reason = disagreement(exit_code, cases, summary)
    if reason is not None:
        return _ended(base, start, status="inconsistent", error="inconsistent", failure="agent", detail=reason)
    resolved = all(outcome == "passed" for outcome in base.tests.values())
    return _ended(base, start, status="resolved" if resolved else "unresolved", error=None if resolved else
                  "tests_failed", failure=None if resolved else "agent")


async def _run_tests(instance: Instance, context: InstanceContext, copy: WorkingCopy,
                     options: GradeOptions) -> tuple[Any, bytes]:
    # Whatever the patches left at the report's path goes before any sandbox process exists.
    await asyncio.to_thread(_remove_report, copy)
    plugins = await base_plugins(context, (instance.spec.test or "").replace("{junit}", "").replace("{tests}", ""))
    command = hardened(test_command(instance), plugins)
    sandbox = await steps.start_sandbox(context.environment, context.setup, copy,
                                        labels={"task": context.task.id, "run": context.run.id, "role": "grade"})
    try:
        result = await steps.check(sandbox, command, timeout=options.timeout)
    finally:
        await sandbox.terminate()
    read = await asyncio.to_thread(read_inside, copy.path, JUNIT_NAME, MAX_REPORT_BYTES)
    return result, b"" if read is None else read[0]


@dataclass(frozen=True)
class TestRun:
    """What the instance's test files reported over some patches: every case, by junit key."""

    cases: dict[tuple[str, str], Outcome]
    exit_code: int | None
    output: str


TestRun.__test__ = False  # type: ignore[attr-defined]  # not a pytest test class, whatever its name


async def run_test_files(instance: Instance, patches: Sequence[str], options: GradeOptions | None = None) -> TestRun:
    """Apply ``patches`` in order to a fresh copy of the base and run the instance's test files in a
    fresh sandbox (what mining a fix commit needs: every case, not only the named ones)."""
    options = options or GradeOptions()
    context = await prepare_instance(instance, "mine", options.isolation)
    try:
        copy = await steps.prepared_copy(context.task, context.run, setup=context.setup)
        for patch in patches:
            await asyncio.to_thread(copy.apply, patch)
        result, report = await _run_tests(instance, context, copy, options)
    finally:
        await asyncio.to_thread(steps.remove_work, context.run)
    return TestRun(parse_junit(report), result.exit_code, result.output[-4000:])


def test_command(instance: Instance, test_files: Sequence[str] | None = None) -> str:
    """The spec's test command with the report's path and the test files (``test_files``, else the
    instance's): in its ``{junit}`` and ``{tests}`` places, or appended."""
    command = instance.spec.test or ""
    tests = " ".join(shlex.quote(name) for name in (instance.test_files if test_files is None else test_files))
    junit = f"--junitxml={JUNIT_PATH} -o junit_family=xunit1"
    command = command.replace("{junit}", junit) if "{junit}" in command else f"{command} {junit}"
    return command.replace("{tests}", tests) if "{tests}" in command else f"{command} {tests}".rstrip()


test_command.__test__ = False  # type: ignore[attr-defined]  # not a pytest test, whatever its name


def _remove_report(copy: WorkingCopy) -> None:
    path = copy.path / JUNIT_NAME
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _with(grade: Grade, **changes: Any) -> Grade:
    return Grade(**{**grade.__dict__, **changes})


def _ended(grade: Grade, start: float, *, status: Status = "error", **changes: Any) -> Grade:
    seconds = {**grade.seconds, **changes.pop("seconds", {}), "total": round(time.monotonic() - start, 3)}
    return _with(grade, status=status, seconds=seconds, **changes)

