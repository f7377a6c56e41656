"""The ways a run ends, as exceptions that carry their exit status (as in mini-swe-agent).

These are control flow, not failures, so they sit outside :class:`~errand.ErrandError`.
A tool or a check raises one; :meth:`Agent.run <errand.agent.Agent.run>` catches it
and turns it into an :class:`~errand.agent.AgentResult`::

    RunEnded                 status
    ├── Finished             "finished"           the model called finish(summary, assumptions)
    ├── NeedsInput           "needs_input"        the model called ask_user(question)
    ├── BudgetExhausted      "budget_exhausted"   a budget ran out; ``budget`` names it
    ├── Stuck                "stuck"              the same tool call, too many times in a row
    └── RunFailed            "error"              the model or the sandbox failed
"""

from __future__ import annotations

from typing import Literal

__all__ = ["BudgetExhausted", "ExitStatus", "Finished", "NeedsInput", "RunEnded", "RunFailed", "Stuck"]

ExitStatus = Literal["finished", "needs_input", "budget_exhausted", "stuck", "error"]


class RunEnded(Exception):
    """A run is over (or paused, for ``needs_input``); ``status`` says how."""

    status: ExitStatus = "error"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Finished(RunEnded):
    status: ExitStatus = "finished"

    def __init__(self, summary: str, assumptions: list[str], answer: str | None = None) -> None:
        super().__init__(summary)
        self.summary = summary
        self.assumptions = assumptions
        self.answer = answer  # the task asked a question: the agent's answer


class NeedsInput(RunEnded):
    status: ExitStatus = "needs_input"

    def __init__(self, question: str, call_id: str) -> None:
        super().__init__(question)
        self.question = question
        self.call_id = call_id


class BudgetExhausted(RunEnded):
    status: ExitStatus = "budget_exhausted"

    def __init__(self, detail: str, budget: Literal["steps", "tokens", "cost", "seconds"]) -> None:
        super().__init__(detail)
        self.budget = budget


class Stuck(RunEnded):
    status: ExitStatus = "stuck"


class RunFailed(RunEnded):
    status: ExitStatus = "error"
