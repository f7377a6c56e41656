"""Errors of the task layer, beneath :class:`errand.errors.ErrandError`::

    ErrandError
    └── TaskError                a task or run could not be changed as asked; nothing changed
        ├── TaskNotFound         no task has that id
        ├── IllegalTransition    the lifecycle forbids ``current → target``
        ├── StateConflict        the task was not in the state the caller expected
        ├── WrongState           the task's state does not allow the action (answer, accept, …)
        ├── NeedsConfirmation    the action is risky (a diff whose tests fail, say): confirm it to go on
        ├── RunNotFound          no run has that id
        ├── RunNotRunning        the run has already ended
        └── StaleStart           a round's start came after its task moved on: it began nothing
    SetupFailed                  a setup command of the repository's errand.toml failed
    EngineBusy                   another worker already serves this errand home
    └── EnginesMixed             the store is served by the other engine (local or Temporal)

Branch on the class or on ``.code``, never on the message.
"""

from __future__ import annotations

from errand.errors import ErrandError

__all__ = ["EngineBusy", "EnginesMixed", "IllegalTransition", "NeedsConfirmation", "RunNotFound", "RunNotRunning",
           "SetupFailed", "StaleStart", "StateConflict", "TaskError", "TaskNotFound", "WrongState"]


class TaskError(ErrandError):
    """An error about one task (``task_id``) or one of its runs (``run_id``)."""

    code = "task_error"

    def __init__(
        self, message: str, *, task_id: str | None = None, run_id: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.task_id = task_id
        self.run_id = run_id


class TaskNotFound(TaskError):
    code = "task_not_found"


class IllegalTransition(TaskError):
    """The lifecycle does not allow moving from ``current`` to ``target``."""

    code = "illegal_transition"

    def __init__(self, message: str, *, current: str, target: str, task_id: str | None = None) -> None:
        super().__init__(message, task_id=task_id)
        self.current = current
        self.target = target


class StateConflict(TaskError):
    """The task was in ``actual``, not the ``expected`` state the caller named (another writer won)."""

    code = "state_conflict"

    def __init__(self, message: str, *, task_id: str, expected: str, actual: str) -> None:
        super().__init__(message, task_id=task_id)
        self.expected = expected
        self.actual = actual


class WrongState(TaskError):
    """The action needs the task in another state (an answer needs ``needs_input``); ``state`` is its state."""

    code = "wrong_state"

    def __init__(self, message: str, *, task_id: str, state: str) -> None:
        super().__init__(message, task_id=task_id)
        self.state = state


class NeedsConfirmation(TaskError):
    """The action would do something a person should confirm first; ``reasons`` says what.
    Asked again with a confirm (``--yes``, ``confirm: true``, the page's confirm step), it goes on."""

    code = "needs_confirmation"

    def __init__(self, message: str, *, task_id: str, reasons: list[str]) -> None:
        super().__init__(message, task_id=task_id)
        self.reasons = list(reasons)


class RunNotFound(TaskError):
    code = "run_not_found"


class RunNotRunning(TaskError):
    """The run has already ended; it takes no more results."""

    code = "run_not_running"


class StaleStart(TaskError):
    """A round's start found its task no longer waiting for it: the task is ``state`` (not
    ``preparing``), or ``preparing`` under another claim than the start's (``claim``). A worker
    that stalled holding the start runs it on waking, after the round was given up and the task
    moved on; it began nothing."""

    code = "stale_start"

    def __init__(self, message: str, *, task_id: str, state: str, claim: int | None) -> None:
        super().__init__(message, task_id=task_id)
        self.state = state
        self.claim = claim


class SetupFailed(ErrandError):
    """A setup command of the repository's environment failed; ``log`` is its output."""

    code = "setup_failed"

    def __init__(self, message: str, *, command: str, exit_code: int | None, log: str) -> None:
        super().__init__(message)
        self.command = command
        self.exit_code = exit_code
        self.log = log


class EngineBusy(ErrandError):
    """Another engine already holds this errand home's worker lock."""

    code = "engine_busy"


class EnginesMixed(EngineBusy):
    """The store is served by the other engine: one store, one engine at a time."""

    code = "engines_mixed"
