"""Consolidation that does not lose facts: when a new memory may merge into an old one, and how a model decides.

Without a model, :meth:`MemoryStore.add <errand.memory.MemoryStore.add>`
merges a new text into a near-duplicate only when
:func:`~errand.memory.conflicts.conflict` finds nothing between them (a
negation, a number or an order that differs).

With a model, :func:`consolidate` shows it the new text and the project's
nearest memories and lets it decide, as mem0 does: **ADD** (a new fact),
**UPDATE** (the same fact, better said: the old memory's text is replaced),
**SUPERSEDE** (the fact changed: the old one is archived, linked to the new),
or **NOOP** (already known). The model's reason is kept in the provenance of
what it wrote. A decision that does not parse, or names a memory that is not
among those shown, falls back to the store's own rules.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from errand.memory.conflicts import conflict as conflict  # re-exported: the rule the store applies
from errand.memory.records import Kind, Memory, Provenance, Status
from errand.memory.retrieve import retrieve
from errand.memory.store import MemoryStore
from errand.models import Message, Model, ModelError

__all__ = ["ACTIONS", "Decision", "consolidate"]

ACTIONS = ("ADD", "UPDATE", "SUPERSEDE", "NOOP")
NEIGHBOURS = 5

@dataclass(frozen=True)
class Decision:
    action: str  # one of ACTIONS
    target: int | None  # the memory UPDATE, SUPERSEDE or NOOP is about
    text: str  # the text to store (ADD, SUPERSEDE) or the old memory's new text (UPDATE)
    reason: str


_SYSTEM = """You keep a software project's memory free of duplicates without losing facts. You are given a \
NEW statement and the project's most similar EXISTING memories (with ids). Decide one action and answer with \
one JSON object only: {"action": "ADD" | "UPDATE" | "SUPERSEDE" | "NOOP", "id": <existing id or null>, \
"text": "<the statement to keep>", "reason": "<one sentence>"}. ADD: the new statement is a different fact. \
UPDATE: it is the same fact as memory id, better or more completely said; text is the merged statement. \
SUPERSEDE: memory id said something that is no longer true and the new statement replaces it. NOOP: memory id \
already says it. Statements that differ in a negation, a number, a name or the order of steps are different \
facts: never UPDATE or NOOP them into one another."""


async def consolidate(
    store: MemoryStore, project: str, text: str, *, kind: Kind | str, provenance: Provenance, model: Model,
    status: Status | str = Status.ACTIVE, confidence: float = 1.0,
) -> tuple[Memory, Decision]:
    """Store ``text`` as the model decides against the project's nearest memories; the memory written
    (or the one already holding the fact) and the decision. The reason goes into the provenance."""
    neighbours = [item.memory for item in retrieve(store, project, text, k=NEIGHBOURS, include_proposed=True)]
    if not neighbours:
        decision = Decision("ADD", None, text, "the project has no similar memory")
    else:
        decision = await _ask(model, text, neighbours)
    noted = Provenance(provenance.source, task_id=provenance.task_id, event_id=provenance.event_id,
                       path=provenance.path, content_hash=provenance.content_hash, commit=provenance.commit,
                       detail=_detail(provenance.detail, model.name, decision))
    if decision.action in ("NOOP", "UPDATE") and decision.target is not None:
        new_text = decision.text if decision.action == "UPDATE" else None
        return store.edit(decision.target, text=new_text, note=noted.detail), decision
    supersedes = decision.target if decision.action == "SUPERSEDE" else None
    stored = store.add(project, decision.text, kind=kind, provenance=noted, status=status, confidence=confidence,
                       supersedes=supersedes)
    return stored, decision


async def _ask(model: Model, text: str, neighbours: list[Memory]) -> Decision:
    shown = "\n".join(f"- id {memory.id}: {memory.text}" for memory in neighbours)
    prompt = f"NEW: {text}\n\nEXISTING:\n{shown}"
    fallback = Decision("ADD", None, text, "the model's decision could not be used; the store's own rules applied")
    try:
        reply = await model.complete([Message("system", _SYSTEM), Message("user", prompt)], [])
    except ModelError:
        return fallback
    return _parse(reply.message.content, text, {memory.id for memory in neighbours}) or fallback


def _parse(answer: str, text: str, ids: set[int]) -> Decision | None:
    found = re.search(r"\{.*\}", answer, re.DOTALL)
    try:
        data = json.loads(found.group(0)) if found else None
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or data.get("action") not in ACTIONS:
        return None
    action, target = str(data["action"]), data.get("id")
    if action != "ADD" and (not isinstance(target, int) or target not in ids):
        return None
    new_text = data.get("text") if isinstance(data.get("text"), str) and data.get("text", "").strip() else text
    reason = str(data.get("reason") or "no reason given")[:300]
    return Decision(action, target if action != "ADD" else None, str(new_text), reason)


def _detail(detail: str | None, model: str, decision: Decision) -> str:
    about = f" memory {decision.target}" if decision.target is not None else ""
    note = f"{decision.action}{about} by {model}: {decision.reason}"
    return f"{detail}; {note}" if detail else note
