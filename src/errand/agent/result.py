"""How a run ended: the one result every agent behind the seam gives, and its plain JSON form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from errand.agent.budgets import Spent
from errand.agent.exits import ExitStatus
from errand.agent.transcript import message_from_json, message_to_json
from errand.models import Message

__all__ = ["AgentResult"]


@dataclass(frozen=True)
class AgentResult:
    """How a run ended (``status``), why (``detail``), and its whole trajectory.

    ``summary`` and ``assumptions`` are set when the run finished (and ``answer``
    when it finished answering a question), ``question`` when it needs input,
    ``budget`` (steps, tokens, cost or seconds) when a budget ran out.
    :meth:`to_json` and :meth:`from_json` carry it across a process boundary
    (an attempt that ended, read back by the worker that concludes the round).
    """

    status: ExitStatus
    detail: str
    messages: list[Message]
    spent: Spent
    summary: str | None = None
    assumptions: list[str] = field(default_factory=list)
    question: str | None = None
    budget: str | None = None
    answer: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "detail": self.detail, "messages": [message_to_json(m) for m in self.messages],
                "spent": asdict(self.spent), "summary": self.summary, "assumptions": list(self.assumptions),
                "question": self.question, "budget": self.budget, "answer": self.answer}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AgentResult:
        return cls(status=data["status"], detail=data["detail"],
                   messages=[message_from_json(m) for m in data["messages"]], spent=Spent(**data["spent"]),
                   summary=data.get("summary"), assumptions=list(data.get("assumptions") or []),
                   question=data.get("question"), budget=data.get("budget"), answer=data.get("answer"))
