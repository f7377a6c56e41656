"""A model distils what a finished task taught into *proposed* memories.

    result = await distill(store, project, task_id, trajectory, model)

The trajectory is the agent's message list (``errand.models.Message``). The
model is shown it (condensed: the start, then as much of the end as fits) with
the memories the project already holds, and offered one tool,
``propose_memory(kind, text)``; it calls it once for each lasting lesson (or
not at all). One model call, no loop. Every proposal goes through the store's
rules (secret refusal, duplicate merge) and starts **proposed**: a person
approves, edits or rejects it before any agent is given it.

The call is the task's like any other: its ``usage`` and ``cost`` come back in
the result for the task's figures, and :func:`estimated_tokens` says, before the
call, about how large it may be, so a budget can refuse it first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from errand.memory.errors import MemoryStoreError
from errand.memory.records import Kind, Memory, Provenance, Status
from errand.memory.store import MemoryStore
from errand.models import Message, Model, Tool, Usage

__all__ = ["PROPOSE_TOOL", "DistillResult", "distill", "estimated_tokens"]

MAX_PROPOSALS = 8
MAX_TRAJECTORY_CHARS = 40_000
MAX_MESSAGE_CHARS = 2_000
KNOWN_SHOWN = 40  # the project's memories shown, so the model proposes none of them again
# For the estimate: characters a token takes (a low figure, so the estimate runs high),
# room for the known memories, and for the reply (a few short proposals).
_CHARS_PER_TOKEN = 3
_KNOWN_ALLOWANCE = KNOWN_SHOWN * 300
_REPLY_ALLOWANCE = 1_500

PROPOSE_TOOL = Tool(
    name="propose_memory",
    description="Propose one lasting fact about this project for future tasks. Call once per fact.",
    parameters={
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": [kind.value for kind in Kind]},
            "text": {"type": "string", "description": "One self-contained statement, with the exact command, "
                                                      "file or name it is about."},
        },
        "required": ["kind", "text"],
        "additionalProperties": False,
    },
)

_SYSTEM = """You maintain the long-term memory of a software project. You are shown what a coding agent did \
in one task. Propose only what will still be true and useful in *future, different* tasks on this project: \
commands that work (setup, test, lint, build), conventions the code follows, pitfalls met and how they were \
avoided, preferences reviewers stated. Do not propose anything about this task's particular change, guesses, \
jokes, or anything already in the known memories. Never include secrets, tokens or passwords. Call \
propose_memory once per lesson; call it not at all if there is nothing lasting. Kinds: command, convention, \
pitfall, preference, fact, instruction."""


@dataclass
class DistillResult:
    proposed: list[Memory] = field(default_factory=list)  # stored, or merged into an existing memory
    rejected: list[str] = field(default_factory=list)  # why each refused proposal was refused (never its text)
    usage: Usage = field(default_factory=Usage)  # what the model call took
    cost: float | None = None  # US dollars; None when the model's price is unknown


async def distill(
    store: MemoryStore, project: str, task_id: str, trajectory: Sequence[Message], model: Model, *,
    event_id: int | None = None,
) -> DistillResult:
    """Ask ``model`` for the lasting lessons of a finished task and store them as proposed memories."""
    known = store.list_memories(project, status=Status.ACTIVE, limit=KNOWN_SHOWN)
    prompt = _prompt(trajectory, known)
    reply = await model.complete([Message("system", _SYSTEM), Message("user", prompt)], [PROPOSE_TOOL])
    result = DistillResult(usage=reply.usage, cost=reply.cost)
    provenance = Provenance.model(task_id, model.name, event_id)
    for call in reply.message.tool_calls[:MAX_PROPOSALS]:
        if call.name != PROPOSE_TOOL.name:
            result.rejected.append(f"unknown tool {call.name!r}")
            continue
        kind, text = call.arguments.get("kind"), call.arguments.get("text")
        if not isinstance(kind, str) or not isinstance(text, str):
            result.rejected.append("kind and text must be strings")
            continue
        try:
            result.proposed.append(store.add(project, text, kind=kind, provenance=provenance,
                                             status=Status.PROPOSED, confidence=0.5))
        except MemoryStoreError as error:
            result.rejected.append(f"{error.code}: {error.message}")
    return result


def estimated_tokens(trajectory: Sequence[Message]) -> int:
    """About how many tokens (prompt and reply) distilling ``trajectory`` takes, erring high."""
    shown = min(sum(len(_render(message)) + 2 for message in trajectory), MAX_TRAJECTORY_CHARS)
    return (len(_SYSTEM) + shown + _KNOWN_ALLOWANCE) // _CHARS_PER_TOKEN + _REPLY_ALLOWANCE


def _prompt(trajectory: Sequence[Message], known: Sequence[Memory]) -> str:
    rendered = [_render(message) for message in trajectory]
    head, tail = rendered[:2], rendered[2:]
    budget = MAX_TRAJECTORY_CHARS - sum(len(part) for part in head)
    kept: list[str] = []
    for part in reversed(tail):  # the end of a task (what finally worked) matters most
        if budget - len(part) < 0:
            kept.append(f"[… {len(tail) - len(kept)} earlier steps left out …]")
            break
        budget -= len(part)
        kept.append(part)
    memories = "\n".join(f"- ({memory.kind}) {memory.text}" for memory in known) or "(none yet)"
    steps = "\n\n".join(head + list(reversed(kept)))
    return f"Known memories of this project:\n{memories}\n\nThe task's trajectory:\n\n{steps}"


def _render(message: Message) -> str:
    content = message.content
    if len(content) > MAX_MESSAGE_CHARS:
        half = MAX_MESSAGE_CHARS // 2
        content = f"{content[:half]}\n[… {len(content) - MAX_MESSAGE_CHARS} characters left out …]\n{content[-half:]}"
    calls = "".join(f"\n-> {call.name}({call.arguments})" for call in message.tool_calls)
    return f"[{message.role}] {content}{calls}"
