"""A round of a task as plain values: its order, written once for every engine.

::

    begin → prepare → attempt × N (in parallel; each may stop on a question) → conclude → close

:func:`begin` starts the round's runs; :func:`prepare` reads the environment once
from the base commit, sets it up (or finds it cached), makes each attempt's
working copy and sandbox, and starts the baseline; :func:`attempt` runs one agent;
:func:`conclude` collects the evidence, ranks once, observes, finalizes and
distills; :func:`close` ends what is left. The local engine calls them in its
process; the Temporal engine calls each from an activity.

What these functions pass between them is plain (:class:`Begun`, :class:`Prepared`,
:class:`Attempt`, :class:`RoundResult`: ids, paths, strings), so it may cross a
process boundary. What cannot — sandboxes, agents, the baseline's future — stays in
the :class:`Bench` of the process that holds the round, found by the round's key.
A process that lacks them (a worker restarted while the task waited days for an
answer) rebuilds them from its disk: the working copies are under the errand home,
the environment is read again from the same base commit, the set-up image comes
from the layer cache, and the agent's conversation from the file its attempt wrote
when it stopped on the question.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from errand.agent import Agent, AgentConfig, AgentHooks, AgentResult, Budgets
from errand.agent.external import CliAdapter, CliAgent, Gateway, ModelAccess, with_layer
from errand.agent.mcp_server import Desk
from errand.agent.seam import DEFAULT_KIND, TaskAgent, cli_adapter
from errand.errors import ConfigError, ErrandError
from errand.memory import MemoryStore
from errand.memory.distill import estimated_tokens
from errand.models import Catalog, Model, ModelEndpoint, ModelError, ScriptedModel, Usage, open_model
from errand.repo import WorkingCopy, checkouts
from errand.sandbox import AsyncSandbox
from errand.tasks.errors import StateConflict
from errand.tasks.evidence import Evidence, TestRun
from errand.tasks.lifecycle import ACTIVE, TaskState
from errand.tasks.progress import BUDGET_NAMES
from errand.tasks.records import Run, RunResult, RunState, Task
from errand.tasks.round import steps
from errand.tasks.round.egress_log import end_sandbox
from errand.tasks.round.environment import Environment, project_guide
from errand.tasks.round.memory_link import TaskMemory
from errand.tasks.round.model_access import RunGrants
from errand.tasks.round.prompt import task_prompt
from errand.tasks.store import claims
from errand.tasks.store.tasks import TaskStore

__all__ = ["Attempt", "Begun", "Bench", "Controls", "ModelFactory", "Prepared", "RoundResult", "all_ended", "attempt",
           "begin", "cancel_runs", "close", "conclude", "deliver_message", "fail", "prepare"]

log = logging.getLogger("errand.engine")

#: Makes the model for one attempt from the task's endpoint: ``(endpoint, attempt index) -> Model``.
ModelFactory = Callable[[ModelEndpoint, int], Model]
_SUSPENDED = "suspended.json"  # an attempt stopped on a question: its conversation
_ENDED = "ended.json"  # an attempt whose agent ended: its result


def default_models(endpoint: ModelEndpoint, _index: int) -> Model:
    return open_model(endpoint, os.environ)


def default_distiller(endpoint: ModelEndpoint) -> Model | None:
    return None if endpoint.provider == "scripted" else open_model(endpoint, os.environ)


# ------------------------------------------------------------------ the plain values


@dataclass(frozen=True)
class Begun:
    """A round whose runs are recorded: its number, its runs, the task's model (as JSON)."""

    task_id: str
    round: int
    run_ids: tuple[str, ...]
    model: dict[str, Any]
    holder: str  # the worker that began it, and prepares it

    @property
    def key(self) -> str:
        return f"{self.task_id}/{self.round}"


@dataclass(frozen=True)
class Prepared:
    """A round ready for its attempts, on the worker ``holder`` (it has the working copies)."""

    task_id: str
    round: int
    run_ids: tuple[str, ...]
    model: dict[str, Any]
    holder: str
    setup_key: str
    copies: tuple[dict[str, Any], ...]  # each attempt's WorkingCopy.to_json()
    prompt: str
    guide: str
    given: str  # what project memory recalled for the task

    @property
    def key(self) -> str:
        return f"{self.task_id}/{self.round}"


@dataclass(frozen=True)
class Attempt:
    """How one attempt's part ended: ``ended`` (its agent's run is over) or ``waiting``
    (it asked ``question`` and its conversation is saved for :func:`attempt` to resume)."""

    index: int
    run_id: str
    status: str
    question: str | None = None


@dataclass(frozen=True)
class RoundResult:
    """What the round came to: the task's new state, its best run, each run's result."""

    task_id: str
    state: TaskState
    best_run_id: str
    results: tuple[RunResult, ...]


class Controls(Protocol):
    """How an attempt waits for a person's answer to its question.

    ``hold`` True: the attempt waits in this process, its sandbox paused, for
    :meth:`wait_for_answer` (the local engine). False: the attempt ends, its
    conversation saved, and a later :func:`attempt` with the answer resumes it
    (a durable engine, whose wait for a signal costs nothing however long it is)."""

    hold: bool

    async def wait_for_answer(self, index: int) -> tuple[str, int]: ...


# ------------------------------------------------------------------ the process's side


@dataclass
class _Live:
    """What one process holds of a round it runs: the live handles behind a Prepared."""

    task: Task
    model: ModelEndpoint
    environment: Environment
    setup: steps.SetUp
    base_tree: Path
    copies: list[WorkingCopy]
    journals: list[steps.Journal]
    link: TaskMemory | None
    sandboxes: list[AsyncSandbox | None]
    agents: list[TaskAgent | None]
    results: list[AgentResult | None]
    baseline: asyncio.Future[TestRun | None] | None = None
    grants: dict[int, ModelAccess] = field(default_factory=dict)  # an agent CLI's model access, by attempt
    desks: dict[int, Desk] = field(default_factory=dict)  # an agent CLI's side of errand's tools, by attempt
    messages: list[tuple[str, int]] = field(default_factory=list)
    waiting: set[int] = field(default_factory=set)
    closed: bool = False  # :func:`close` ended it: a sandbox that starts later has no one else to end it

    async def keep(self, index: int, sandbox: AsyncSandbox) -> AsyncSandbox:
        """Keep the attempt's new sandbox; if the round was closed while it started (its worker lost
        the round meanwhile), end it and say so: it would run on with its copy gone."""
        if self.closed:
            await end_sandbox(sandbox, self.journals[index], "agent")
            raise ErrandError(f"round {self.task.id} was closed while its sandbox {sandbox.id} started; it was ended",
                              code="round_closed")
        self.sandboxes[index] = sandbox
        return sandbox


@dataclass
class Bench:
    """What a process that runs rounds has: the store, the worker's settings, and the live
    handles of the rounds it holds (by :attr:`Prepared.key`)."""

    store: TaskStore
    worker: str
    isolation: str = "namespace"
    budgets: Budgets = field(default_factory=Budgets)
    models: ModelFactory = default_models
    distiller: Callable[[ModelEndpoint], Model | None] = default_distiller
    memory: MemoryStore | None = None
    default_model: str | None = None
    #: Where an agent CLI's model calls go: the host's model gateway, started at the first grant
    #: (None: tasks of an agent CLI fail with the reason, since the model key never enters a sandbox).
    gateway: Gateway | None = field(default_factory=RunGrants)
    rounds: dict[str, _Live] = field(default_factory=dict)
    #: Rebuilds of rounds' live handles under way (see :func:`_live`), by :attr:`Prepared.key`.
    rebuilding: dict[str, asyncio.Future[_Live]] = field(default_factory=dict)

    def sandboxes(self, key: str) -> list[AsyncSandbox | None]:
        """The agents' sandboxes of the round ``key`` this process holds (None: not running here)."""
        live = self.rounds.get(key)
        return list(live.sandboxes) if live is not None else []

    async def event(self, task_id: str, run_id: str | None, kind: str, data: dict[str, Any]) -> None:
        await asyncio.to_thread(self.store.append_event, task_id, run_id, kind, data)

    def journal(self, task_id: str, run_id: str) -> steps.Journal:
        async def sink(kind: str, data: dict[str, Any]) -> None:
            await self.event(task_id, run_id, kind, data)
        return steps.Journal(sink)

    async def move(self, task_id: str, target: TaskState, expected: TaskState) -> None:
        with contextlib.suppress(StateConflict):
            await asyncio.to_thread(self.store.set_state, task_id, target, expected=expected)


# ------------------------------------------------------------------ begin, prepare


async def begin(bench: Bench, task: Task, *, claim: int | None = None) -> Begun:
    """Record the round's runs (one per attempt) for this worker, while the task is ``preparing``
    (under ``claim``, the one the round's start was issued for): else :class:`StaleStart`, and
    nothing is recorded. The task's model is checked first, in this worker's environment: a task
    it cannot serve fails whole, with no run."""
    endpoint, said = model_of(task, bench.default_model)
    runs = await asyncio.to_thread(claims.begin_round, bench.store, task.id, bench.worker, task.attempts, claim=claim)
    number, run_ids = runs[0].round, [run.id for run in runs]
    await bench.event(task.id, None, "round_started", {"round": number, "runs": run_ids, "worker": bench.worker,
                                                       "agent": task.agent or DEFAULT_KIND})
    await bench.event(task.id, None, "model_endpoint", said)
    return Begun(task.id, number, tuple(run_ids), endpoint.to_json(), bench.worker)


async def prepare(bench: Bench, begun: Begun) -> Prepared:
    """Everything the attempts start from, and the task moved to running.

    What shapes the round comes from the base commit, never from the work a follow-up
    continues (an agent could rewrite errand.toml or AGENTS.md in it); it is read once."""
    store = bench.store
    task = await asyncio.to_thread(store.get_task, begun.task_id)
    runs = [await asyncio.to_thread(store.get_run, run_id) for run_id in begun.run_ids]
    journals = [bench.journal(task.id, run.id) for run in runs]
    base_tree = await asyncio.to_thread(steps.base_checkout, task)
    environment = await asyncio.to_thread(Environment.load, base_tree)
    await bench.event(task.id, None, "environment", _environment_event(environment, task, bench))
    setup = await steps.set_up(environment, task, runs[0], base_tree, journals[0], isolation=bench.isolation)
    patch = await asyncio.to_thread(followed_patch, store, task.id, begun.round)
    # Every copy's making to its end, a failure of one or a cancel alike: the round's close removes
    # the work, and a copy mounted after that would be left mounted (steps.in_thread_to_its_end).
    made = await asyncio.gather(*(steps.prepared_copy(task, run, patch, setup=setup) for run in runs),
                                return_exceptions=True)
    if failed := next((item for item in made if isinstance(item, BaseException)), None):
        raise failed
    copies = [item for item in made if isinstance(item, WorkingCopy)]
    link = TaskMemory(bench.memory, task, base_tree, journals[0]) if bench.memory is not None else None
    live = _Live(task, ModelEndpoint.from_json(begun.model), environment, setup, base_tree, copies, journals, link,
                 [None] * len(runs), [None] * len(runs), [None] * len(runs))
    bench.rounds[begun.key] = live
    live.baseline = asyncio.ensure_future(steps.tests_on_base(environment, setup, copies[0], journals[0],
                                                              labels=_labels(runs[0], "baseline")))
    if (task.agent or DEFAULT_KIND) == DEFAULT_KIND:  # an agent CLI's sandbox waits for its model access
        started = await asyncio.gather(*(steps.start_sandbox(environment, setup, copy, labels=_labels(run))
                                         for copy, run in zip(copies, runs, strict=True)))
        kept = await asyncio.gather(*(live.keep(index, sandbox) for index, sandbox in enumerate(started)),
                                    return_exceptions=True)
        if live.closed:
            raise next(error for error in kept if isinstance(error, BaseException))
    await asyncio.to_thread(claims.run_round, store, task.id, begun.run_ids)
    prompt = await asyncio.to_thread(task_prompt, store, task, begun.round, environment)
    guide = await asyncio.to_thread(project_guide, base_tree, environment)
    given = await link.given(guide.whole) if link is not None else ""
    return Prepared(task.id, begun.round, begun.run_ids, begun.model, bench.worker, setup.key,
                    tuple(copy.to_json() for copy in copies), prompt, guide.text, given)


def followed_patch(store: TaskStore, task_id: str, number: int) -> str | None:
    """A round continues the best attempt of the last round that finished (a follow-up
    builds on the work it follows); a task's first round starts from the base."""
    finished = [(r, r.outcome) for r in store.runs(task_id) if r.round < number]
    best = [outcome for _run, outcome in finished if outcome is not None and outcome.rank == 1]
    return (best[-1].patch or None) if best else None


def model_of(task: Task, default_model: str | None) -> tuple[ModelEndpoint, dict[str, Any]]:
    """The task's model as its submission recorded it, and what the log says of it.

    A task from before endpoints were recorded is resolved here, in this worker's
    environment, and the log says so. The key is read from this environment by the
    recorded variable's name: missing, the task fails before any run starts; not the
    submitter's, the log says that too.
    """
    endpoint, resolved_by = task.model_endpoint, "submission"
    if endpoint is None:
        spec = task.model or default_model
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


# ------------------------------------------------------------------ an attempt


async def attempt(bench: Bench, prepared: Prepared, index: int, controls: Controls, *,
                  messages: Sequence[tuple[str, int]] = (), answer: tuple[str, int] | None = None) -> Attempt:
    """Run attempt ``index``'s agent until its run ends, or (``controls.hold`` False) until it
    asks a question. With ``answer``, resume the attempt that stopped on a question.
    ``messages`` are the people's messages of the round so far (those its agent has not
    had are delivered at its next step)."""
    live = await _live(bench, prepared)
    run_id = prepared.run_ids[index]
    journal = live.journals[index]
    for text, ref in messages:
        _remember(live, text, ref)
    agent = live.agents[index]
    if answer is None and agent is None:
        agent = await _new_agent(bench, live, prepared, index)
        result = await agent.run(prepared.prompt)
    else:
        if agent is None:
            agent = await _restored_agent(bench, live, prepared, index)
        assert answer is not None
        await bench.move(prepared.task_id, TaskState.RUNNING, TaskState.NEEDS_INPUT)
        await journal("answer_delivered", {"text": answer[0], "ref": answer[1]})
        result = await agent.resume(answer[0])
    while result.status == "needs_input":
        await journal("question", {"text": result.question})
        if not controls.hold:
            await _suspend(bench, live, prepared, index, agent)
            return Attempt(index, run_id, "waiting", result.question)
        text, ref = await _wait_here(bench, live, prepared, index, controls)
        await journal("answer_delivered", {"text": text, "ref": ref})
        result = await agent.resume(text)
    result = metered(result, await _revoke(bench, live, index, run_id))
    live.results[index] = result
    await asyncio.to_thread(_save, prepared, index, _ENDED, {"result": result.to_json(),
                                                           "commands": journal.commands})
    return Attempt(index, run_id, "ended")


def all_ended(bench: Bench, key: str) -> bool:
    """Whether every attempt of the round ``key`` ended in this process (so it can conclude here)."""
    live = bench.rounds.get(key)
    return live is not None and all(result is not None for result in live.results)


def deliver_message(bench: Bench, key: str, text: str, ref: int) -> None:
    """A person's message to the round ``key`` holds: each live agent gets it at its next step,
    and attempts that start or resume later get it too."""
    live = bench.rounds.get(key)
    if live is not None:
        _remember(live, text, ref)


def _remember(live: _Live, text: str, ref: int) -> None:
    if any(known == ref for _text, known in live.messages):
        return
    live.messages.append((text, ref))
    for journal, agent in zip(live.journals, live.agents, strict=True):
        if agent is not None and ref not in journal.delivered:
            agent.send_message(text, ref=ref)


async def _new_agent(bench: Bench, live: _Live, prepared: Prepared, index: int) -> TaskAgent:
    """The attempt's agent, of the task's kind: errand's own loop, or an agent CLI in the sandbox."""
    journal = live.journals[index]
    budgets = live.environment.budgets or bench.budgets
    agent: TaskAgent
    if (live.task.agent or DEFAULT_KIND) != DEFAULT_KIND:
        adapter = cli_adapter(live.task.agent or "", workdir=steps.WORKSPACE)
        access, sandbox = await _cli_sandbox(bench, live, prepared, index, adapter)
        agent = CliAgent(adapter, sandbox, access, workdir=steps.WORKSPACE, budgets=budgets, on_event=journal,
                         instructions=prepared.guide or None, memories=prepared.given or None,
                         profile=live.model.profile, desk=live.desks.get(index))
    else:
        sandbox = await _sandbox(bench, live, prepared, index)
        hooks = live.link.attempt(journal) if live.link is not None else None
        config = AgentConfig(workdir=steps.WORKSPACE, budgets=budgets, instructions=prepared.guide or None,
                             memories=prepared.given or None)
        on_file = hooks.opened if hooks is not None else None
        agent = Agent(bench.models(live.model, index), sandbox, config,
                      AgentHooks(on_event=journal, memory=hooks, file_notes=on_file))
    for text, ref in live.messages:
        if ref not in journal.delivered:
            agent.send_message(text, ref=ref)
    live.agents[index] = agent
    return agent


async def _cli_sandbox(bench: Bench, live: _Live, prepared: Prepared, index: int,
                       adapter: CliAdapter) -> tuple[ModelAccess, AsyncSandbox]:
    """An agent CLI's model access (granted by the host's gateway for this run) and its sandbox:
    the set-up image with the CLI's layer on top, relaying the gateway's address inside to the host's."""
    if bench.gateway is None:
        raise ErrandError(f"this worker has no model gateway, and {adapter.kind} runs in the sandbox, where "
                          "the model key never goes; run the task with errand's own agent (--agent errand)",
                          code="no_gateway")
    if live.model.provider != adapter.provider:
        raise ConfigError(f"{adapter.kind} talks to {adapter.provider}'s models, and the task's model is "
                          f"{live.model.describe()}; pass --model {adapter.provider}:MODEL", code="model_mismatch")
    access = live.grants.get(index)
    if access is None:
        budgets = live.environment.budgets or bench.budgets
        desk = live.desks[index] = Desk(live.link.attempt(live.journals[index]) if live.link is not None else None)
        access = live.grants[index] = await bench.gateway.grant(prepared.run_ids[index], live.model, budgets,
                                                                adapter.protocol, desk)
    sandbox = live.sandboxes[index]
    if sandbox is None:
        run = await asyncio.to_thread(bench.store.get_run, prepared.run_ids[index])
        image = await with_layer(live.setup.image, adapter)
        sandbox = await live.keep(index, await steps.start_sandbox(
            live.environment, live.setup, live.copies[index], labels=_labels(run), image=image, gateway=access.relay))
    return access, sandbox


async def _revoke(bench: Bench, live: _Live, index: int, run_id: str) -> tuple[Usage, float] | None:
    """End an agent CLI's model access (its token stops working once its run has ended); what it metered."""
    access = live.grants.pop(index, None)
    if access is None or bench.gateway is None:
        return None
    return await bench.gateway.revoke(run_id)


def metered(result: AgentResult, gateway: tuple[Usage, float] | None) -> AgentResult:
    """The result with what the gateway metered for its run where that is more than the agent's
    stream counted: the gateway saw every call; the stream only those of its steps."""
    if gateway is None:
        return result
    usage, cost = gateway
    spent = replace(result.spent)
    more = Usage(max(usage.input_tokens - spent.input_tokens, 0), max(usage.output_tokens - spent.output_tokens, 0),
                 max(usage.cache_read_tokens - spent.cache_read_tokens, 0),
                 max(usage.cache_write_tokens - spent.cache_write_tokens, 0))
    if more.input_tokens or more.output_tokens:
        spent.add(more, max(cost - spent.cost, 0.0))
    return replace(result, spent=spent)


async def _restored_agent(bench: Bench, live: _Live, prepared: Prepared, index: int) -> TaskAgent:
    """The agent of an attempt that stopped on a question, in this process: its conversation
    read back, a sandbox over the same working copy, the model past the replies it made."""
    saved = await asyncio.to_thread(_load, prepared, index, _SUSPENDED)
    if saved is None:
        raise ErrandError(f"run {prepared.run_ids[index]} has no saved conversation on this worker to resume",
                          code="conversation_missing")
    journal = live.journals[index]
    journal.commands[:] = saved["commands"]
    journal.delivered.update(saved["delivered"])
    agent = await _new_agent(bench, live, prepared, index)
    agent.restore(saved["agent"])
    model = getattr(agent, "model", None)
    if isinstance(model, ScriptedModel):  # a script is read from the start by each copy of the model
        model.skip(agent.spent.steps)
    return agent


async def _suspend(bench: Bench, live: _Live, prepared: Prepared, index: int, agent: TaskAgent) -> None:
    """Save the attempt's conversation and end its sandbox: nothing runs while a person thinks."""
    journal = live.journals[index]
    keep = getattr(agent, "keep_session", None)  # an agent CLI's session files, out of the sandbox that ends
    if keep is not None:
        await keep()
    await asyncio.to_thread(_save, prepared, index, _SUSPENDED, {
        "agent": agent.suspended(), "commands": journal.commands, "delivered": sorted(journal.delivered)})
    sandbox, live.sandboxes[index], live.agents[index] = live.sandboxes[index], None, None
    if sandbox is not None:
        await end_sandbox(sandbox, journal, "agent")
    await bench.move(prepared.task_id, TaskState.NEEDS_INPUT, TaskState.RUNNING)


async def _wait_here(bench: Bench, live: _Live, prepared: Prepared, index: int,
                     controls: Controls) -> tuple[str, int]:
    """Pause the attempt's sandbox and the task until a person answers."""
    sandbox = live.sandboxes[index]
    assert sandbox is not None
    live.waiting.add(index)
    await sandbox.pause()
    await bench.move(prepared.task_id, TaskState.NEEDS_INPUT, TaskState.RUNNING)
    try:
        answer = await controls.wait_for_answer(index)
    finally:
        live.waiting.discard(index)
    await sandbox.resume()
    if not live.waiting:
        await bench.move(prepared.task_id, TaskState.RUNNING, TaskState.NEEDS_INPUT)
    return answer


async def _sandbox(bench: Bench, live: _Live, prepared: Prepared, index: int) -> AsyncSandbox:
    sandbox = live.sandboxes[index]
    if sandbox is None:
        run = await asyncio.to_thread(bench.store.get_run, prepared.run_ids[index])
        sandbox = await live.keep(index, await steps.start_sandbox(live.environment, live.setup, live.copies[index],
                                                                   labels=_labels(run)))
    return sandbox


# ------------------------------------------------------------------ the end


async def conclude(bench: Bench, prepared: Prepared, *, settled: Callable[[], None] = lambda: None) -> RoundResult:
    """Collect each attempt's evidence, rank once, let memory observe, store the results and
    move the task on, then distill. ``settled`` is called once the results are being written
    (from then on a cancel comes too late)."""
    live = await _live(bench, prepared)
    results = [await _ended(live, prepared, index) for index in range(len(prepared.run_ids))]
    tests_before = await _baseline(live)
    evidence = await asyncio.gather(*(_evidence(bench, live, prepared, index, result, tests_before)
                                      for index, result in enumerate(results)))
    order = steps.rank([item for item, _patch in evidence])
    best = order[0]
    if live.link is not None:
        await live.link.observe(live.environment, evidence[best][0], setup_ran=bool(live.environment.setup))
    settled()
    caches = {"environment": live.setup.describe() if live.environment.setup else None,
              "baseline": None if tests_before is None else {"cached": tests_before.cached}}
    runs = [await asyncio.to_thread(bench.store.get_run, run_id) for run_id in prepared.run_ids]
    stored = await asyncio.to_thread(steps.finalize, bench.store, prepared.task_id, runs, results, list(evidence),
                                     caches=caches, order=order)
    if live.link is not None:
        await _distill(bench, live, prepared, best, results[best])
    task = await asyncio.to_thread(bench.store.get_task, prepared.task_id)
    return RoundResult(prepared.task_id, task.state, prepared.run_ids[best], tuple(stored))


async def _ended(live: _Live, prepared: Prepared, index: int) -> AgentResult:
    result = live.results[index]
    if result is not None:
        return result
    saved = await asyncio.to_thread(_load, prepared, index, _ENDED)
    if saved is None:
        raise ErrandError(f"run {prepared.run_ids[index]} has not ended on this worker", code="attempt_not_ended")
    live.journals[index].commands[:] = saved["commands"]
    live.results[index] = result = AgentResult.from_json(saved["result"])
    return result


async def _baseline(live: _Live) -> TestRun | None:
    if live.baseline is None:  # a process that did not prepare the round: the cache has it, or it runs now
        live.baseline = asyncio.ensure_future(steps.tests_on_base(live.environment, live.setup, live.copies[0],
                                                                  live.journals[0]))
    return await live.baseline


async def _evidence(bench: Bench, live: _Live, prepared: Prepared, index: int, result: AgentResult,
                    tests_before: TestRun | None) -> tuple[Evidence, str]:
    """The attempt's diff and the checks on it. Its sandbox ends first: a process the agent
    left running could otherwise change the tree while the host reads it (swap a directory
    for a symlink to a host path mid-walk). The checks run in a fresh sandbox of the
    set-up environment over the same tree, as the accepted branch will be tested."""
    sandbox, live.sandboxes[index] = live.sandboxes[index], None
    if sandbox is not None:
        await end_sandbox(sandbox, live.journals[index], "agent")
    copy = live.copies[index]
    diff = await asyncio.to_thread(copy.diff)
    run = await asyncio.to_thread(bench.store.get_run, prepared.run_ids[index])
    checks = await steps.start_sandbox(live.environment, live.setup, copy, labels=_labels(run, "checks"))
    try:
        evidence = await steps.collect_evidence(result, diff, live.journals[index], environment=live.environment,
                                                sandbox=checks, tests_before=tests_before)
    finally:
        await end_sandbox(checks, live.journals[index], "checks")
    return evidence, diff.text


async def _distill(bench: Bench, live: _Live, prepared: Prepared, index: int, result: AgentResult) -> None:
    """Let a model propose what the finished task taught; a person approves each.

    The call is the best run's, like its agent's calls: counted in its figures, and made
    only while its token and cost budgets have room for it (else skipped, and said why).
    The task is ready for review by now: whatever goes wrong here is said, and leaves it so."""
    assert live.link is not None
    journal = live.journals[index]
    budgets = live.environment.budgets or bench.budgets
    refusal = result.spent.refusal(budgets, estimated_tokens(result.messages))
    if refusal is not None:
        reason, budget = refusal
        await journal("distill_skipped", {"reason": f"memories were not distilled from this task: {reason}",
                                          "budget": budget})
        return
    try:
        model = bench.distiller(live.model)
        if model is None:
            return
        await live.link.distill(result.messages, model, journal)
    except ErrandError as error:
        await bench.event(prepared.task_id, None, "distill_failed", {"reason": error.message})
    except Exception as error:  # a bug of ours or a provider's odd answer must not fail a finished task
        log.exception("distilling memories of task %s failed", prepared.task_id)
        await bench.event(prepared.task_id, None, "distill_failed",
                          {"reason": f"{type(error).__name__}: {error}"[:500]})


async def close(bench: Bench, key: str, run_ids: Sequence[str]) -> None:
    """End the round's sandboxes and remove its working copies (whatever ended the round). It goes
    to its end although its caller is cancelled meanwhile (the cancel is raised after): cut short,
    the round was gone from the bench and a sandbox whose end had begun ran on, its copy removed."""
    closing = asyncio.ensure_future(_close(bench, key, run_ids))
    try:
        await asyncio.shield(closing)
    except asyncio.CancelledError:
        await asyncio.wait([closing])
        raise


async def _close(bench: Bench, key: str, run_ids: Sequence[str]) -> None:
    rebuilding = bench.rebuilding.get(key)
    if rebuilding is not None:
        # An attempt cancelled as it rebuilt the round's handles (the close cancels them) leaves the
        # rebuild running: closed before it ends, the work went before it mounted the copies again,
        # and its handles were left in bench.rounds, of a round closed already. Its error is its askers'.
        await asyncio.wait([rebuilding])
    live = bench.rounds.pop(key, None)
    if live is not None:
        live.closed = True
        if live.baseline is not None:
            if not live.baseline.done():
                live.baseline.cancel()
                await asyncio.wait([live.baseline])  # it ends its sandbox as it is cancelled: closed is closed
            if not live.baseline.cancelled() and (error := live.baseline.exception()) is not None:
                # Nothing awaits it now (the round ended before its checks): said here, once, not by
                # asyncio's "Task exception was never retrieved" with a traceback when it is collected.
                log.info("round %s: the base's tests ended with: %s", key, error)
        for index in list(live.grants):
            with contextlib.suppress(ErrandError):
                await _revoke(bench, live, index, run_ids[index])
        for sandbox, journal in zip(live.sandboxes, live.journals, strict=True):
            if sandbox is not None:
                with contextlib.suppress(ErrandError):
                    if sandbox.paused:
                        await sandbox.resume()
                await end_sandbox(sandbox, journal, "agent")
    for run_id in run_ids:  # by id: a round whose store is away (its step cut short by that) still goes
        await asyncio.to_thread(steps.remove_work_of, run_id)


def fail(store: TaskStore, task_id: str, run_ids: Sequence[str], error: BaseException) -> None:
    """End the round as failed with ``error``'s reason: its runs, then the task, while its round is
    still in flight. A task the round already settled (its results stored: ready for review) or
    that moved on without it (cancelled, queued again) is left as it is: a failure after that
    undoes nothing a person may already be looking at."""
    reason = error.message if isinstance(error, ErrandError) else f"{type(error).__name__}: {error}"
    if not isinstance(error, ErrandError):
        log.error("task %s failed", task_id, exc_info=error)
    data: dict[str, Any] = {"reason": reason, "code": getattr(error, "code", "internal_error")}
    if isinstance(error, steps.SetupFailed):
        data.update(command=error.command, exit_code=error.exit_code, log=error.log[-steps.OUTPUT_TAIL:])
    for run_id in run_ids:
        with contextlib.suppress(ErrandError):
            store.finish_run(run_id, RunState.FAILED, data)
    while (state := store.get_task(task_id).state) in ACTIVE:
        with contextlib.suppress(StateConflict):  # it moved meanwhile (asked, say): look again
            store.set_state(task_id, TaskState.FAILED, expected=state, event=("failed", data))
            return
    log.warning("task %s is %s, so the failure of its round after that leaves it so: %s", task_id, state.value,
                reason)


def cancel_runs(store: TaskStore, task_id: str, run_ids: Sequence[str]) -> bool:
    """Mark the round's runs cancelled if a person cancelled the task (True); a shutdown's
    leaves them running, for recovery to requeue (False)."""
    if store.get_task(task_id).state is not TaskState.CANCELLED:
        return False
    for run_id in run_ids:
        with contextlib.suppress(ErrandError):
            store.finish_run(run_id, RunState.CANCELLED, None)
    return True


# ------------------------------------------------------------------ finding the live handles


async def _live(bench: Bench, prepared: Prepared) -> _Live:
    """The round's live handles in this process, rebuilt from disk if it does not have them.

    Once, however many ask at once: after a Temporal worker restarts, each attempt of a round asks
    as it resumes. Rebuilt twice, the overlays would be mounted twice over each other, and the
    second rebuild's handles would replace the first's, so the round's close would never end the
    sandbox an attempt had put in the first. A caller cancelled meanwhile leaves the rebuild to
    run on (for the others, and for the close, which unmounts what it mounted)."""
    live = bench.rounds.get(prepared.key)
    if live is not None:
        return live
    rebuilding = bench.rebuilding.get(prepared.key)
    if rebuilding is None:
        rebuilding = bench.rebuilding[prepared.key] = asyncio.ensure_future(_rebuild(bench, prepared))
        rebuilding.add_done_callback(lambda done: done.cancelled() or done.exception())  # said to each asker
    return await asyncio.shield(rebuilding)


async def _rebuild(bench: Bench, prepared: Prepared) -> _Live:
    try:
        live = await asyncio.to_thread(_rebuilt, bench, prepared)
        bench.rounds[prepared.key] = live
        return live
    finally:
        del bench.rebuilding[prepared.key]


def _rebuilt(bench: Bench, prepared: Prepared) -> _Live:
    task = bench.store.get_task(prepared.task_id)
    base_tree = steps.base_checkout(task)
    environment = Environment.load(base_tree)
    setup = steps.cached_set_up(environment, prepared.setup_key, bench.isolation)
    copies = [_reopened(fields, setup) for fields in prepared.copies]
    journals = [bench.journal(task.id, run_id) for run_id in prepared.run_ids]
    link = TaskMemory(bench.memory, task, base_tree, journals[0]) if bench.memory is not None else None
    count = len(prepared.run_ids)
    return _Live(task, ModelEndpoint.from_json(prepared.model), environment, setup, base_tree, copies, journals,
                 link, [None] * count, [None] * count, [None] * count)


def _reopened(fields: Mapping[str, Any], setup: steps.SetUp) -> WorkingCopy:
    """A working copy this worker made earlier, its overlay mounted again if a restart lost it."""
    copy = WorkingCopy.from_json(fields)
    if copy.overlay and not os.path.ismount(copy.path):
        upper, work = copy.path.with_name(copy.path.name + ".upper"), copy.path.with_name(copy.path.name + ".work")
        if not upper.is_dir():
            raise ErrandError(f"the working copy {copy.path} is gone from this worker", code="work_missing")
        copy.path.mkdir(parents=True, exist_ok=True)
        checkouts.mount_overlay([*setup.layers, copy.host_git.parent / "tree"], upper, work, copy.path)
    return copy


def _state_path(prepared: Prepared, index: int, name: str) -> Path:
    return steps.work_dir_of(prepared.run_ids[index]) / name


def _save(prepared: Prepared, index: int, name: str, data: dict[str, Any]) -> None:
    path = _state_path(prepared, index, name)
    partial = path.with_name(f".{name}.{os.getpid()}")
    partial.write_text(json.dumps(data))
    os.replace(partial, path)


def _load(prepared: Prepared, index: int, name: str) -> dict[str, Any] | None:
    try:
        loaded: dict[str, Any] = json.loads(_state_path(prepared, index, name).read_text())
    except (OSError, ValueError):
        return None
    return loaded


def _labels(run: Run, role: str = "agent") -> dict[str, str]:
    return {"task": run.task_id, "run": run.id, "role": role}


def _environment_event(environment: Environment, task: Task, bench: Bench) -> dict[str, Any]:
    """What shapes the round, and where it came from: the base commit's errand.toml (or the defaults)."""
    budgets = environment.budgets or bench.budgets
    return {"config": "errand.toml" if environment.source is not None else None, "detected": environment.detected,
            "commit": task.base_commit,
            "test": environment.test, "lint": environment.lint, "network": environment.network.to_dict(),
            "setup_network": environment.setup_egress.to_dict() if environment.setup else None,
            "isolation": bench.isolation, "budgets": {name: getattr(budgets, name) for name in BUDGET_NAMES}}
