"""``errand eval run``: an agent attempts each instance k times, then each attempt is graded.

An attempt runs as a task's run does, through the task layer's steps: a working
copy of the base commit cloned from the stripped source (so the fix is not in its
history), the cached set-up environment, the agent in a sandbox of its own, then
errand's evidence and confidence from the project's test command in a fresh
sandbox. The agent's patch is then graded in yet another sandbox
(:mod:`errand.eval.grading`), which the agent never touched. Each attempt keeps
its patch, spend, confidence and trajectory in the run directory.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from errand.agent import Agent, AgentConfig, AgentHooks, AgentResult, Budgets
from errand.errors import ErrandError
from errand.eval.dataset import Instance
from errand.eval.errors import EvalError
from errand.eval.grading import Grade, GradeOptions, InstanceContext, grade, prepare_instance, test_command
from errand.eval.predictions import Prediction, write_predictions
from errand.eval.runs import attempt_dir, read_json, save_grade, write_json
from errand.models import Catalog, Model, open_model
from errand.tasks.round import steps

__all__ = ["RunOptions", "confidence_command", "prompt_for", "run_attempts"]

ModelFactory = Callable[[str], Model]


def _open(spec: str) -> Model:
    return open_model(Catalog.load().resolve(spec, os.environ), os.environ)


@dataclass(frozen=True)
class RunOptions:
    model: str
    attempts: int = 1
    concurrency: int = 1
    budgets: Budgets = field(default_factory=Budgets)
    grading: GradeOptions = field(default_factory=GradeOptions)
    models: ModelFactory = _open


def prompt_for(instance: Instance) -> str:
    return (f"{instance.problem_statement.strip()}\n\nThe repository is checked out at {steps.WORKSPACE}. "
            "Change its code so the issue above is fixed, run its tests, then finish with a summary.")


async def run_attempts(instances: Sequence[Instance], run: Path, options: RunOptions,
                       progress: Callable[[Grade, bool], None] | None = None) -> list[Grade]:
    """Every (instance, attempt) not already done in ``run``, ``options.concurrency`` at a time."""
    if options.attempts < 1 or options.concurrency < 1:
        raise EvalError("-k and --jobs must be at least 1", code="eval_bad_jobs")
    gate = asyncio.Semaphore(options.concurrency)

    async def one(instance: Instance, number: int) -> Grade:
        label = f"attempt-{number}"
        where = attempt_dir(run, instance.instance_id, label)
        if (where / "grade.json").is_file():
            saved = Grade.from_json(read_json(where / "grade.json"))
            if saved.failure != "infrastructure":
                if progress:
                    progress(saved, True)
                return saved
        async with gate:
            patch = await _solve(instance, where, options)
            result = await grade(instance, patch, label, options.grading)
        await asyncio.to_thread(save_grade, run, result)
        if progress:
            progress(result, False)
        return result

    results = await asyncio.gather(*(one(i, n) for i in instances for n in range(1, options.attempts + 1)))
    for number in range(1, options.attempts + 1):
        write_predictions(run / f"predictions-attempt-{number}.jsonl", [
            Prediction(i.instance_id, options.model, _patch_of(attempt_dir(run, i.instance_id, f"attempt-{number}")))
            for i in instances])
    return list(results)


def _patch_of(where: Path) -> str:
    path = where / "agent.json"
    return str(read_json(path).get("patch", "")) if path.is_file() else ""


async def _solve(instance: Instance, where: Path, options: RunOptions) -> str:
    """One agent attempt; its record in ``where/agent.json``; the patch it made."""
    events: list[dict[str, Any]] = []

    async def sink(kind: str, data: dict[str, Any]) -> None:
        events.append({"time": round(time.time(), 3), "kind": kind, "data": data})

    journal = steps.Journal(sink)
    start = time.monotonic()
    record: dict[str, Any] = {"model": options.model}
    try:
        record.update(await _attempt(instance, journal, options))
    except ErrandError as error:
        record.update(status="error", detail=error.message, code=error.code, patch="")
    record["wall_seconds"] = round(time.monotonic() - start, 3)
    await asyncio.to_thread(write_json, where / "trajectory.json", events)
    await asyncio.to_thread(write_json, where / "agent.json", record)
    return str(record.get("patch", ""))


async def _attempt(instance: Instance, journal: steps.Journal, options: RunOptions) -> dict[str, Any]:
    context = await prepare_instance(instance, "agent", options.grading.isolation, journal)
    try:
        copy = await steps.prepared_copy(context.task, context.run, setup=context.setup)
        labels = {"task": context.task.id, "run": context.run.id}
        sandbox = await steps.start_sandbox(context.environment, context.setup, copy, labels={**labels,
                                                                                              "role": "agent"})
        try:
            agent = Agent(options.models(options.model), sandbox,
                          AgentConfig(workdir=steps.WORKSPACE, budgets=options.budgets), AgentHooks(on_event=journal))
            result = await agent.run(prompt_for(instance))
        finally:
            await sandbox.terminate()
        diff = await asyncio.to_thread(copy.diff)
        confidence = await _confidence(instance, context, copy, result, diff, journal, labels)
    finally:
        await asyncio.to_thread(steps.remove_work, context.run)
    return {"status": result.status, "detail": result.detail, "summary": result.summary, "patch": diff.text,
            "tokens": result.spent.tokens, "cost": result.spent.cost, "steps": result.spent.steps,
            "seconds": round(result.spent.seconds, 3), **confidence}


async def _confidence(instance: Instance, context: InstanceContext, copy: Any, result: AgentResult, diff: Any,
                      journal: steps.Journal, labels: dict[str, str]) -> dict[str, Any]:
    """errand's own confidence in the attempt, from the evidence a reviewer would get: the test
    command as grading fills it (``{junit}``, ``{tests}``), on the base and after the change."""
    environment = replace(context.environment, test=confidence_command(instance, context))
    before = await steps.tests_on_base(environment, context.setup, copy, journal, labels=labels)
    checks = await steps.start_sandbox(environment, context.setup, copy, labels={**labels, "role": "checks"})
    try:
        evidence = await steps.collect_evidence(result, diff, journal, environment=environment,
                                                sandbox=checks, tests_before=before)
    finally:
        await checks.terminate()
    return {"confidence": evidence.confidence.level, "confidence_reasons": evidence.confidence.reasons}


def confidence_command(instance: Instance, context: InstanceContext) -> str:
    """The test command the confidence step runs: grading's, over the instance's test files that
    the base holds (one the test patch adds is not there to run, before or after the change)."""
    base_tree = context.base_tree
    present = [name for name in instance.test_files if base_tree is None or (base_tree / name).is_file()]
    return test_command(instance, present)
