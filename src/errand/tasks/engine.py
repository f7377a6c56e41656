"""The local engine: a worker pool in one process that runs queued tasks through the steps.

``LocalEngine.serve()`` claims queued tasks (compare-and-set, so several
engines may share a store), runs each claim as a *round* — one run per
parallel attempt — and watches the store for what people send while it works:
messages (delivered at the agent's next step), answers (resuming a run paused
on a question, its sandbox frozen meanwhile) and cancellation.

One engine serves one errand home, holding ``worker.lock``; several engines,
on one machine or many, may share one store (PostgreSQL across machines). Each
holds a lease in the store and renews it every third of its length; on start
and at every renewal it settles what dead workers left behind (see
:meth:`~errand.tasks.store.TaskStore.recover_dead_workers`): a worker whose
lease expired, or that served this engine's own home (its lock is ours now, so
it ended). The rule is *requeue after a first interruption, fail after a second
in a row*, every event kept. An engine that finds its own lease gone (it was
too slow to renew, and another worker took its runs) stops its rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from errand import _settings
from errand.agent import Agent, AgentResult, Budgets
from errand.errors import ConfigError, ErrandError
from errand.memory import MemoryStore
from errand.models import Catalog, Model, ModelEndpoint, ModelError, open_model
from errand.repo import WorkingCopy, checkouts
from errand.sandbox import AsyncSandbox
from errand.sandbox.backend import get_backend
from errand.tasks import steps
from errand.tasks.environment import Environment, project_guide
from errand.tasks.errors import IllegalTransition, RunNotFound, StateConflict
from errand.tasks.events import CONTROL_KINDS
from errand.tasks.evidence import Evidence
from errand.tasks.lifecycle import TaskState
from errand.tasks.memory_link import TaskMemory
from errand.tasks.progress import BUDGET_NAMES
from errand.tasks.prompt import task_prompt
from errand.tasks.records import Run, RunState, Task
from errand.tasks.store import TaskStore
from errand.tasks.workers import EngineBusy, WorkerInfo, hold, worker_running

__all__ = ["EngineBusy", "LocalEngine", "ModelFactory", "worker_running"]

log = logging.getLogger("errand.engine")

#: Makes the model for one attempt from the task's endpoint: ``(endpoint, attempt index) -> Model``.
ModelFactory = Callable[[ModelEndpoint, int], Model]
#: How long a worker's lease lasts unless renewed (``ERRAND_WORKER_LEASE``, seconds): how long
#: a dead worker's tasks wait before another machine takes them over.
DEFAULT_LEASE = 30.0

_OWN = object()


def _default_models(endpoint: ModelEndpoint, _index: int) -> Model:
    return open_model(endpoint, os.environ)


def _default_distiller(endpoint: ModelEndpoint) -> Model | None:
    return None if endpoint.provider == "scripted" else open_model(endpoint, os.environ)


@dataclass
class _Attempt:
    index: int
    run: Run
    journal: steps.Journal
    copy: WorkingCopy | None = None
    sandbox: AsyncSandbox | None = None
    agent: Agent | None = None
    answer: asyncio.Future[tuple[str, int]] | None = None


@dataclass
class _Round:
    task: Task
    attempts: list[_Attempt]
    handle: asyncio.Task[None] | None = None
    control_after: int = 0
    messages: list[tuple[str, int]] = field(default_factory=list)
    settling: bool = False  # finishing or cancelled: no more cancellation
    model: ModelEndpoint | None = None  # the task's, checked against this worker's environment


class LocalEngine:
    """Runs tasks from ``store``, ``concurrency`` tasks at a time."""

    def __init__(self, store: TaskStore, *, concurrency: int = 2, worker: str | None = None,
                 poll_interval: float = 0.1, default_model: str | None = None, budgets: Budgets | None = None,
                 models: ModelFactory = _default_models, memory: MemoryStore | object | None = _OWN,
                 distiller: Callable[[ModelEndpoint], Model | None] = _default_distiller,
                 isolation: str | None = None, lease: float | None = None) -> None:
        """``memory`` is the project memory tasks are given and teach (default: one on the
        store's own database; ``None`` runs without memory). ``distiller(endpoint)`` gives the
        model that distils a finished task into proposed memories (default: the task's
        own model, unless it is a scripted one; ``None`` from it: no distilling). ``isolation``
        is the sandbox tier tasks run on (default ``ERRAND_ISOLATION``, else ``namespace``). ``lease``
        is how long, in seconds, this worker's lease lasts unless renewed (default
        ``ERRAND_WORKER_LEASE``, else 30)."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"concurrency must be a positive integer, not {concurrency!r}")
        self.store = store
        self.concurrency = concurrency
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        self.poll_interval = poll_interval
        self.default_model = default_model or os.environ.get("ERRAND_MODEL") or None
        self.budgets = budgets or Budgets()
        self._models = models
        self._distiller = distiller
        self.memory: MemoryStore | None = MemoryStore(store.engine) if memory is _OWN else memory  # type: ignore[assignment]
        self._rounds: dict[str, _Round] = {}
        self.isolation = isolation or os.environ.get("ERRAND_ISOLATION") or "namespace"
        self.lease = lease if lease is not None else _lease_from_environment()
        self._renewed = 0.0
        get_backend(self.isolation)  # an unknown tier is refused here, not at the first task

    # ------------------------------------------------------------ serving

    async def serve(self, *, stop: asyncio.Event | None = None, exit_when_idle: float | None = None,
                    ready: Callable[[], None] | None = None) -> None:
        """Work until ``stop`` is set (or, with ``exit_when_idle``, until nothing was
        queued or running for that many seconds). ``ready`` is called once this engine is the
        home's worker (it raises :class:`EngineBusy` before then if another one is)."""
        stop = stop or asyncio.Event()
        with hold(WorkerInfo.of_this_process(self.worker, self.concurrency, os.environ)):
            if ready is not None:
                ready()
            await asyncio.to_thread(self.store.register_worker, self.worker, home=_home(), lease=self.lease)
            self._renewed = time.monotonic()
            await self._recover()
            await self._remove_stale_work()
            await self._prune()
            idle_since = time.monotonic()
            try:
                while not stop.is_set():
                    await self._keep_lease()
                    await self._claim()
                    await self._poll_controls()
                    if self._rounds:
                        idle_since = time.monotonic()
                    elif exit_when_idle is not None and time.monotonic() - idle_since >= exit_when_idle:
                        return
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self.poll_interval)
            finally:
                await self._shutdown()

    async def _keep_lease(self) -> None:
        """Renew the lease every third of its length, and take over what dead workers left."""
        if time.monotonic() - self._renewed < self.lease / 3:
            return
        self._renewed = time.monotonic()
        if not await asyncio.to_thread(self.store.renew_lease, self.worker, self.lease):
            log.error("worker %s lost its lease (it did not renew it within %g s); its runs were requeued "
                      "by another worker, so its rounds stop here", self.worker, self.lease)
            await self._stop_rounds()
            await asyncio.to_thread(self.store.register_worker, self.worker, home=_home(), lease=self.lease)
        await self._recover()

    async def _stop_rounds(self) -> None:
        handles = [r.handle for r in self._rounds.values() if r.handle is not None]
        for handle in handles:
            handle.cancel()
        await asyncio.gather(*handles, return_exceptions=True)

    async def _recover(self) -> None:
        recoveries = await asyncio.to_thread(self.store.recover_dead_workers, self.worker, home=_home())
        for recovery in recoveries:
            if recovery.run_id is not None:
                steps.remove_work(await asyncio.to_thread(self.store.get_run, recovery.run_id))
            await self._event(recovery.task_id, None, "recovered", {
                "run_id": recovery.run_id, "previous": recovery.previous.value, "state": recovery.state.value,
                "rule": "requeued after a first interruption, failed after a second in a row"})

    async def _remove_stale_work(self) -> None:
        """Remove the work of runs that are no longer running: a worker on another machine
        recovered them while this home's worker was dead, and could not reach this disk."""
        for run_id in await asyncio.to_thread(steps.work_runs):
            try:
                run = await asyncio.to_thread(self.store.get_run, run_id)
            except RunNotFound:
                continue  # not this store's (a home may have served another database before)
            if run.state is not RunState.RUNNING:
                await asyncio.to_thread(steps.remove_work, run)

    async def _prune(self) -> None:
        """Remove pristine checkouts no task has used for a while (the next task on them checks out again)."""
        try:
            removed = await asyncio.to_thread(checkouts.prune)
        except OSError as error:  # a full or read-only disk must not stop the worker
            log.warning("pruning unused checkouts failed: %s", error)
            return
        if removed:
            log.info("removed %d unused checkouts", len(removed))

    async def _claim(self) -> None:
        while len(self._rounds) < self.concurrency:
            task = await asyncio.to_thread(self.store.claim_next, self.worker)
            if task is None:
                return
            # Controls sent before this round began were for an earlier one (or are in its prompt);
            # known before the round is polled at all, or an old message reaches the new attempts.
            round_ = _Round(task, [], control_after=await self._last_control_id(task.id))
            self._rounds[task.id] = round_
            round_.handle = asyncio.create_task(self._run_round(round_), name=f"errand-task-{task.id}")

    async def _shutdown(self) -> None:
        """Stop every round; their runs are left to recovery, which requeues them."""
        await self._stop_rounds()
        await asyncio.to_thread(self.store.recover_interrupted, self.worker)
        await asyncio.to_thread(self.store.release_worker, self.worker)

    # ------------------------------------------------------------ control

    async def _poll_controls(self) -> None:
        for round_ in list(self._rounds.values()):
            try:
                await self._poll_round(round_)
            except Exception:  # one task's trouble must not stop the engine
                log.exception("reading controls of task %s failed", round_.task.id)

    async def _poll_round(self, round_: _Round) -> None:
        task = await asyncio.to_thread(self.store.get_task, round_.task.id)
        if task.state is TaskState.CANCELLED:
            if round_.handle is not None and not round_.handle.done() and not round_.settling:
                round_.settling = True
                round_.handle.cancel()  # a person cancelled it
            return
        if task.state not in (TaskState.PREPARING, TaskState.RUNNING, TaskState.NEEDS_INPUT):
            return  # the round is ending it
        controls = await asyncio.to_thread(self.store.events, task.id, round_.control_after, kinds=CONTROL_KINDS)
        for event in controls:
            round_.control_after = event.id
            text = str(event.data.get("text", ""))
            if event.kind == "message_sent":
                self._deliver_message(round_, text, event.id)
            else:
                self._deliver_answer(round_, text, event.id)

    def _deliver_message(self, round_: _Round, text: str, ref: int) -> None:
        round_.messages.append((text, ref))
        for attempt in round_.attempts:
            if attempt.agent is not None:
                attempt.agent.send_message(text, ref=ref)

    def _deliver_answer(self, round_: _Round, text: str, ref: int) -> None:
        for attempt in round_.attempts:
            if attempt.answer is not None and not attempt.answer.done():
                attempt.answer.set_result((text, ref))

    # ------------------------------------------------------------ a round

    async def _run_round(self, round_: _Round) -> None:
        task = round_.task
        try:
            round_.model, said = self._model_of(task)  # before any run: a task it cannot serve fails whole
            number = await asyncio.to_thread(self.store.next_round, task.id)
            for index in range(task.attempts):
                run = await asyncio.to_thread(self.store.start_run, task.id, self.worker, round=number)
                round_.attempts.append(_Attempt(index, run, steps.Journal(self._sink(task.id, run.id))))
            await self._event(task.id, None, "round_started", {
                "round": number, "runs": [a.run.id for a in round_.attempts], "worker": self.worker})
            await self._event(task.id, None, "model_endpoint", said)
            await self._execute(round_, number)
        except asyncio.CancelledError:
            await self._end_cancelled(round_)
        except Exception as error:  # noqa: BLE001 - any failure ends the task as failed, with its reason
            round_.settling = True
            await self._end_failed(round_, error)
        finally:
            round_.settling = True
            try:
                await _uncancellable(self._clean_up(round_))
            finally:
                # A retry may have queued, and this engine claimed, the task's next round already.
                if self._rounds.get(task.id) is round_:
                    del self._rounds[task.id]

    async def _execute(self, round_: _Round, number: int) -> None:
        task, attempts = round_.task, round_.attempts
        first = attempts[0]
        # Everything that shapes the round comes from the base commit, never from the work a
        # follow-up continues (an agent could rewrite errand.toml or AGENTS.md in it).
        base_tree = await asyncio.to_thread(steps.base_checkout, task)
        environment = await asyncio.to_thread(Environment.load, base_tree)
        await self._event(task.id, None, "environment",
                          _environment_event(environment, task, self.isolation, self.budgets))
        setup = await steps.set_up(environment, task, first.run, base_tree, first.journal,
                                   isolation=self.isolation)
        patch = await asyncio.to_thread(self._followed_patch, task.id, number)
        copies = await asyncio.gather(*(asyncio.to_thread(steps.prepare_copy, task, a.run, patch, setup=setup)
                                        for a in attempts))
        for attempt, copy in zip(attempts, copies, strict=True):
            attempt.copy = copy
        baseline = asyncio.ensure_future(steps.tests_on_base(environment, setup, copies[0], first.journal,
                                                             labels=_labels(first, "baseline")))
        try:
            sandboxes = await asyncio.gather(*(steps.start_sandbox(environment, setup, a.copy, labels=_labels(a))
                                               for a in attempts if a.copy is not None))
            for attempt, sandbox in zip(attempts, sandboxes, strict=True):
                attempt.sandbox = sandbox
            await asyncio.to_thread(self.store.set_state, task.id, TaskState.RUNNING, expected=TaskState.PREPARING)
            prompt = await asyncio.to_thread(task_prompt, self.store, task, number, environment)
            guide = await asyncio.to_thread(project_guide, base_tree, environment)
            link = self._memory_link(task, base_tree, first.journal)
            given = await link.given(guide.whole) if link is not None else ""
            budgets = environment.budgets or self.budgets
            results = await asyncio.gather(*(self._attempt(round_, a, prompt, guide.text, budgets, link, given)
                                             for a in attempts))
            tests_before = await baseline
        finally:
            if not baseline.done():
                baseline.cancel()
        evidence = await asyncio.gather(*(self._evidence(a, r, environment, setup, tests_before)
                                          for a, r in zip(attempts, results, strict=True)))
        best = steps.rank([item for item, _ in evidence])[0]
        if link is not None:
            await link.observe(environment, evidence[best][0], setup_ran=bool(environment.setup))
        round_.settling = True  # from here a cancel comes too late: the result is being written
        caches = {"environment": {"key": setup.key, "cached": setup.cached} if environment.setup else None,
                  "baseline": None if tests_before is None else {"cached": tests_before.cached}}
        await asyncio.to_thread(steps.finalize, self.store, task.id, [a.run for a in attempts], results, evidence,
                                caches=caches)
        if link is not None:
            await self._distill(round_, link, results[best])

    def _model_of(self, task: Task) -> tuple[ModelEndpoint, dict[str, Any]]:
        """The task's model as its submission recorded it, and what the log says of it.

        A task from before endpoints were recorded is resolved here, in this worker's
        environment, and the log says so. The key is read from this environment by the
        recorded variable's name: missing, the task fails before any run starts; not the
        submitter's, the log says that too.
        """
        endpoint, resolved_by = task.model_endpoint, "submission"
        if endpoint is None:
            spec = task.model or self.default_model
            if spec is None:
                raise ConfigError("no model is configured: pass --model or set ERRAND_MODEL", code="no_model")
            endpoint, resolved_by = Catalog.load().resolve(spec, os.environ), "worker"
        key = endpoint.key_status(os.environ)
        if key == "missing":
            raise ModelError(f"this worker's environment has no ${endpoint.api_key_env}, the key variable of "
                             f"{endpoint.describe()}; nothing was run. Start the worker where it is set "
                             "(`errand worker stop`, then `errand run` or `errand worker` from a shell that "
                             "has it)", provider=endpoint.provider, code="model_key_missing")
        shown = {k: v for k, v in endpoint.to_json().items() if k != "key_fingerprint"}
        return endpoint, {"model": shown, "describe": endpoint.describe(), "resolved_by": resolved_by, "key": key}

    async def _distill(self, round_: _Round, link: TaskMemory, result: AgentResult) -> None:
        """Let a model propose what the finished task taught; a person approves each."""
        try:
            model = self._distiller(round_.model) if round_.model is not None else None
            if model is None:
                return
            await link.distill(result.messages, model)
        except ErrandError as error:
            await self._event(round_.task.id, None, "distill_failed", {"reason": error.message})

    def _memory_link(self, task: Task, base_tree: Path, journal: steps.Journal) -> TaskMemory | None:
        if self.memory is None:
            return None
        return TaskMemory(self.memory, task, base_tree, journal)

    async def _attempt(self, round_: _Round, attempt: _Attempt, prompt: str, guide: str, budgets: Budgets,
                       link: TaskMemory | None, given: str) -> AgentResult:
        assert attempt.sandbox is not None and round_.model is not None
        hooks = link.attempt(attempt.journal) if link is not None else None
        agent = Agent(self._models(round_.model, attempt.index), attempt.sandbox, workdir=steps.WORKSPACE,
                      budgets=budgets, on_event=attempt.journal, instructions=guide or None, memory=hooks,
                      memories=given or None, file_notes=hooks.opened if hooks is not None else None)
        for text, ref in round_.messages:
            agent.send_message(text, ref=ref)
        attempt.agent = agent
        return await steps.run_agent(agent, prompt, attempt.journal,
                                     lambda _question: self._wait_for_answer(round_, attempt))

    async def _wait_for_answer(self, round_: _Round, attempt: _Attempt) -> tuple[str, int]:
        """Pause the attempt's sandbox and the task until a person answers (a store event)."""
        assert attempt.sandbox is not None
        attempt.answer = asyncio.get_running_loop().create_future()
        await attempt.sandbox.pause()
        await self._move(round_.task.id, TaskState.NEEDS_INPUT, TaskState.RUNNING)
        try:
            answer = await attempt.answer
        finally:
            attempt.answer = None
        await attempt.sandbox.resume()
        if not any(a.answer is not None for a in round_.attempts):
            await self._move(round_.task.id, TaskState.RUNNING, TaskState.NEEDS_INPUT)
        return answer

    async def _evidence(self, attempt: _Attempt, result: AgentResult, environment: Environment,
                        setup: steps.SetUp, tests_before: Any) -> tuple[Evidence, str]:
        """The attempt's diff and the checks on it. Its sandbox ends first: a process the agent
        left running could otherwise change the tree while the host reads it (swap a directory
        for a symlink to a host path mid-walk). The checks run in a fresh sandbox of the
        set-up environment over the same tree, as the accepted branch will be tested."""
        assert attempt.copy is not None and attempt.sandbox is not None
        await attempt.sandbox.terminate()
        diff = await asyncio.to_thread(attempt.copy.diff)
        checks = await steps.start_sandbox(environment, setup, attempt.copy, labels=_labels(attempt, "checks"))
        try:
            evidence = await steps.collect_evidence(result, diff, attempt.journal, environment=environment,
                                                    sandbox=checks, tests_before=tests_before)
        finally:
            await checks.terminate()
        return evidence, diff.text

    # ------------------------------------------------------------ endings

    async def _end_cancelled(self, round_: _Round) -> None:
        task = await asyncio.to_thread(self.store.get_task, round_.task.id)
        if task.state is not TaskState.CANCELLED:
            return  # a shutdown: the runs stay running for recovery to requeue
        for attempt in round_.attempts:
            with contextlib.suppress(ErrandError):
                await asyncio.to_thread(self.store.finish_run, attempt.run.id, RunState.CANCELLED, None)

    async def _end_failed(self, round_: _Round, error: Exception) -> None:
        reason = error.message if isinstance(error, ErrandError) else f"{type(error).__name__}: {error}"
        if not isinstance(error, ErrandError):
            log.exception("task %s failed", round_.task.id)
        data: dict[str, Any] = {"reason": reason, "code": getattr(error, "code", "internal_error")}
        if isinstance(error, steps.SetupFailed):
            data.update(command=error.command, exit_code=error.exit_code, log=error.log[-steps.OUTPUT_TAIL:])
        for attempt in round_.attempts:
            with contextlib.suppress(ErrandError):
                await asyncio.to_thread(self.store.finish_run, attempt.run.id, RunState.FAILED, data)
        with contextlib.suppress(IllegalTransition, StateConflict):
            await asyncio.to_thread(self.store.set_state, round_.task.id, TaskState.FAILED, event=("failed", data))

    async def _clean_up(self, round_: _Round) -> None:
        for attempt in round_.attempts:
            if attempt.sandbox is not None:
                with contextlib.suppress(ErrandError):
                    if attempt.sandbox.paused:
                        await attempt.sandbox.resume()
                await attempt.sandbox.terminate()
            await asyncio.to_thread(steps.remove_work, attempt.run)

    # ------------------------------------------------------------ helpers

    def _sink(self, task_id: str, run_id: str) -> steps.EventSink:
        async def sink(kind: str, data: dict[str, Any]) -> None:
            await self._event(task_id, run_id, kind, data)
        return sink

    async def _event(self, task_id: str, run_id: str | None, kind: str, data: dict[str, Any]) -> None:
        await asyncio.to_thread(self.store.append_event, task_id, run_id, kind, data)

    async def _move(self, task_id: str, target: TaskState, expected: TaskState) -> None:
        with contextlib.suppress(StateConflict):
            await asyncio.to_thread(self.store.set_state, task_id, target, expected=expected)

    async def _last_control_id(self, task_id: str) -> int:
        last = await asyncio.to_thread(self.store.last_event, task_id, CONTROL_KINDS)
        return last.id if last is not None else 0

    def _followed_patch(self, task_id: str, number: int) -> str | None:
        """A round continues the best attempt of the last round that finished (a follow-up
        builds on the work it follows); a task's first round starts from the base."""
        finished = [r for r in self.store.runs(task_id) if r.round < number
                    and isinstance(r.result, dict) and r.result.get("rank") == 1]
        return str(finished[-1].result.get("patch") or "") or None if finished else None


def _home() -> str:
    """This worker's home as the store knows it: the host and the home's resolved path."""
    return f"{socket.gethostname()}:{_settings.home().resolve()}"


def _lease_from_environment() -> float:
    text = os.environ.get("ERRAND_WORKER_LEASE", "").strip()
    if not text:
        return DEFAULT_LEASE
    try:
        lease = float(text)
    except ValueError:
        lease = 0.0
    if not lease > 0:
        raise ConfigError(f"ERRAND_WORKER_LEASE must be a positive number of seconds, not {text!r}",
                          code="bad_worker_lease")
    return lease


def _labels(attempt: _Attempt, role: str = "agent") -> dict[str, str]:
    return {"task": attempt.run.task_id, "run": attempt.run.id, "role": role}


def _environment_event(environment: Environment, task: Task, isolation: str, budgets: Budgets) -> dict[str, Any]:
    """What shapes the round, and where it came from: the base commit's errand.toml (or the defaults)."""
    return {"config": "errand.toml" if environment.source is not None else None, "commit": task.base_commit,
            "test": environment.test, "lint": environment.lint, "network": environment.network.to_dict(),
            "setup_network": environment.setup_egress.to_dict() if environment.setup else None,
            "isolation": isolation, "budgets": _budgets(environment.budgets or budgets)}


def _budgets(budgets: Budgets) -> dict[str, float | int | None]:
    return {name: getattr(budgets, name) for name in BUDGET_NAMES}


async def _uncancellable(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` to its end even if the caller is cancelled meanwhile (then re-raise):
    a sandbox must be ended and a working copy removed whatever stops the round."""
    future = asyncio.ensure_future(work)
    cancelled = False
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            cancelled = True
    future.result()
    if cancelled:
        raise asyncio.CancelledError
