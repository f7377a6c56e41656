"""Where a task stands, in figures a person reads at a glance: how long it has taken, what
its model calls have used (steps, tokens, cost) against the budgets its round runs under,
per attempt and for the whole task.

The figures come from the store alone, so every face (web page, ``errand show``, the
API) tells the same story, and a task another worker runs reads the same as a local one.
An ended run's figures are the ``spent`` its result recorded (which also holds its working
time); only a run still going has its ``model`` events read and summed. A model call made
for a run after it ended (distilling memories from the best one) is the run's too: its
``memories_proposed`` event carries the call's usage, added to that run's figures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from errand.tasks.events import CallUsage, EnvironmentUsed
from errand.tasks.lifecycle import FINAL, TaskState
from errand.tasks.records import Run, Task
from errand.tasks.store.tasks import TaskStore

__all__ = ["BUDGET_NAMES", "AttemptProgress", "Progress", "Usage", "progress"]

BUDGET_NAMES = ("max_steps", "max_tokens", "max_cost", "max_seconds")


@dataclass(frozen=True)
class Usage:
    """What model calls used. ``cost`` is in US dollars; ``cost_known`` is false when any
    call's provider said nothing of its price (the figure then counts those calls as free).
    Of the input tokens, ``cached_tokens`` were read from the provider's prompt cache and
    ``cache_write_tokens`` written to it."""

    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    cost_known: bool = True
    cache_write_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.steps + other.steps, self.input_tokens + other.input_tokens,
                     self.output_tokens + other.output_tokens, self.cached_tokens + other.cached_tokens,
                     self.cost + other.cost, self.cost_known and other.cost_known,
                     self.cache_write_tokens + other.cache_write_tokens)

    @classmethod
    def of_call(cls, call: CallUsage, steps: int = 1) -> Usage:
        """One model call's usage, as its event carries it (a step of the agent unless ``steps``)."""
        return cls(steps, call.input_tokens, call.output_tokens, call.cache_read_tokens,
                   call.cost if call.cost is not None else 0.0, call.cost is not None, call.cache_write_tokens)


@dataclass(frozen=True)
class AttemptProgress:
    run_id: str
    round: int
    attempt: int
    state: str
    started_at: float
    ended_at: float | None
    usage: Usage
    seconds: float  # wall time so far (or until it ended)


@dataclass(frozen=True)
class Progress:
    state: TaskState
    started_at: float
    ended_at: float | None  # set once the task is final or waits for review
    usage: Usage  # every round's model calls
    round: int  # the latest round (0 before the first starts)
    attempts: list[AttemptProgress]  # the latest round's
    budgets: dict[str, float | int | None] = field(default_factory=dict)  # of the latest round's runs

    @property
    def seconds(self) -> float:
        return (self.ended_at or time.time()) - self.started_at

    def left(self) -> dict[str, float | int | None]:
        """Per budget, what the most-used attempt of the latest round has left (None: no limit)."""
        used = {"max_steps": max((a.usage.steps for a in self.attempts), default=0),
                "max_tokens": max((a.usage.tokens for a in self.attempts), default=0),
                "max_cost": max((a.usage.cost for a in self.attempts), default=0.0),
                "max_seconds": max((a.seconds for a in self.attempts), default=0.0)}
        left: dict[str, float | int | None] = {}
        for name in BUDGET_NAMES:
            limit = self.budgets.get(name)
            left[name] = None if limit is None else max(0, limit - used[name])
        return left

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state.value, "started_at": self.started_at, "ended_at": self.ended_at,
                "seconds": round(self.seconds, 3), "usage": _usage_json(self.usage), "round": self.round,
                "budgets": self.budgets, "budgets_left": self.left(),
                "attempts": [{"run_id": a.run_id, "round": a.round, "attempt": a.attempt, "state": a.state,
                              "started_at": a.started_at, "ended_at": a.ended_at, "seconds": round(a.seconds, 3),
                              "usage": _usage_json(a.usage)} for a in self.attempts]}


def progress(store: TaskStore, task: Task, runs: list[Run] | None = None) -> Progress:
    """The task's figures now."""
    runs = store.runs(task.id) if runs is None else runs
    after = _after_runs(store, task.id)
    usage = {run.id: _run_usage(store, run) + after.get(run.id, Usage()) for run in runs}
    latest = max((run.round for run in runs), default=0)
    environment = store.last_event(task.id, ["environment"])
    budgets = EnvironmentUsed.of(environment).budgets if environment is not None else {}
    now = time.time()
    attempts = [AttemptProgress(run.id, run.round, run.attempt, run.state.value, run.started_at, run.ended_at,
                                usage[run.id], _run_seconds(run, now)) for run in runs if run.round == latest]
    total = sum(usage.values(), Usage())
    final = task.state in FINAL or task.state is TaskState.READY_FOR_REVIEW  # the work stopped: the clock too
    return Progress(task.state, task.created_at, task.updated_at if final else None, total, latest,
                    sorted(attempts, key=lambda a: a.attempt), dict(budgets))


def _run_usage(store: TaskStore, run: Run) -> Usage:
    """An ended run's own account (``spent``), which also holds what no model event shows (the
    calls that condensed it); else, while it runs, the sum of its ``model`` events, read only then."""
    spent = run.result.get("spent") if isinstance(run.result, dict) else None
    if isinstance(spent, dict) and "input_tokens" in spent:
        cost = spent.get("cost")
        return Usage(_count(spent.get("steps")), _count(spent.get("input_tokens")),
                     _count(spent.get("output_tokens")), _count(spent.get("cache_read_tokens")),
                     float(cost) if isinstance(cost, int | float) else 0.0, _count(spent.get("unpriced_calls")) == 0,
                     _count(spent.get("cache_write_tokens")))
    live = sum((Usage.of_call(CallUsage.of(e)) for e in store.events(run.task_id, 0, 10_000_000, kinds=["model"],
                                                                     run_id=run.id) if isinstance(e.data, dict)),
               Usage())
    if isinstance(spent, dict) and isinstance(spent.get("cost"), int | float):  # a run from before spent split
        return Usage(max(live.steps, _count(spent.get("steps"))), live.input_tokens, live.output_tokens,
                     live.cached_tokens, float(spent["cost"]), live.cost_known, live.cache_write_tokens)
    return live


#: Events that record a model call made for a run once its agent ended (not a step of it).
AFTER_RUN_CALLS = ("memories_proposed",)


def _after_runs(store: TaskStore, task_id: str) -> dict[str, Usage]:
    """Per run, the model calls made for it after its agent ended."""
    found: dict[str, Usage] = {}
    for event in store.events(task_id, 0, 1_000_000, kinds=list(AFTER_RUN_CALLS)):
        call = CallUsage.of(event)
        if event.run_id is not None and call.reported:
            found[event.run_id] = found.get(event.run_id, Usage()) + Usage.of_call(call, steps=0)
    return found


def _run_seconds(run: Run, now: float) -> float:
    spent = run.result.get("spent") if isinstance(run.result, dict) else None
    if isinstance(spent, dict) and isinstance(spent.get("seconds"), int | float):
        return float(spent["seconds"])
    return (run.ended_at or now) - run.started_at


def _usage_json(usage: Usage) -> dict[str, Any]:
    return {"steps": usage.steps, "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cached_tokens": usage.cached_tokens, "cache_write_tokens": usage.cache_write_tokens,
            "tokens": usage.tokens, "cost": round(usage.cost, 6),
            "cost_known": usage.cost_known}


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
