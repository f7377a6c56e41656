"""The vocabulary of a task's log, declared once: every event kind and the data fields it carries.

The engine, the steps and the service write these kinds (the agent loop writes its
own — ``model``, ``tool_call``, ``output`` and the rest — through the journal the
steps give it); the command line (:mod:`errand.cli.events`), the web UI
(:mod:`errand.server.eventview`) and the prompt's history read them. A test holds
every writer and both renderers to this table, so a new kind or field is declared
here first and a renderer cannot drift to a name nobody writes.

What other modules read back out of a log is read here too, once: a typed reader per
kind (:class:`Committed` of ``accepted`` and ``prepared``, :class:`MemoriesGiven`,
:func:`text_of` of the kinds that carry a text, …), each tolerant of an old or odd row —
a field it lacks, or one of the wrong type, reads as that field's default. No other
module reads an event's data by a field's name (``tests/test_event_reads.py`` walks the
source for it), except the renderers, which show every kind: they take an event's data
whole through :func:`data_of`, and the test above holds them to this table. (The forge's
own kinds are declared and read back beside their writer, :mod:`errand.forge.timeline`.)

``fields`` are the keys an event's ``data`` may have; every event of a run's agent
also carries ``step``, the agent step it happened in. ``shown`` says whether a
person's log shows the kind (a kind that is only read back by code, such as the
agent's full ``message``, is not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from errand.tasks.comments import LineComment
from errand.tasks.records import Event

__all__ = ["CONTROL_KINDS", "FORWARDED_KINDS", "KINDS", "OUTPUT_KINDS", "Answered", "CallUsage", "Committed",
           "Credited", "EgressSeen", "EnvironmentUsed", "Failed", "FollowupSaid", "Kind", "MemoriesGiven", "Recovered",
           "Rejected", "ToolCalled", "ToolReturned", "data_of", "declared", "followup_data", "text_of"]


@dataclass(frozen=True)
class Kind:
    name: str
    fields: frozenset[str]
    about: str
    shown: bool = True
    output: bool = False  # streamed text, shown as it came


def _kind(name: str, fields: str, about: str, *, shown: bool = True, output: bool = False) -> Kind:
    return Kind(name, frozenset(fields.split()), about, shown, output)


_AGENT = "step"  # every agent event's
_USAGE = "cache_read_tokens cache_write_tokens cost input_tokens output_tokens run_cost run_tokens"  # a model call's

KINDS: Mapping[str, Kind] = {kind.name: kind for kind in (
    # a round, as the engine runs it
    _kind("round_started", "agent round runs worker",
          "a worker claimed the task and opened a round of N attempts, worked by its agent"),
    _kind("model_endpoint", "describe key model resolved_by", "the model the round uses, and where it came from"),
    _kind("environment", "budgets commit config detected isolation lint network setup_network test",
          "what shapes the round, read from the base commit"),
    _kind("setup_started", "key commands keyed_on network reused",
          "the environment's setup commands begin (or, reused from another commit, its refresh)"),
    _kind("setup_output", "text", "a line the setup printed", output=True),
    _kind("setup_cached", "key keyed_on reused tree_layer", "the environment was set up before; its layer is reused"),
    _kind("setup_tree", "kept kept_sample left_tracked untracked", "what setup wrote into the working tree"),
    _kind("setup_finished", "key refresh_failed refreshed reused", "setup ended and its layer is cached"),
    _kind("secrets", "given role withheld",
          "the operator's declared secrets a sandbox of the task gets (names and hosts, never a value), and those "
          "left out, each with its reason"),
    _kind("egress", "hosts last_refused more_hosts more_refused refusal_counts refused role",
          "what a sandbox of the task reached through its egress proxy, and what was refused and why"),
    _kind("tests_before", "cached command exit_code failed passed", "the tests on the base commit"),
    _kind("memories_given", "ids lines stale", "the project memories the agent was given", shown=False),
    _kind("memories_surfaced", "ids lines path", "rules and memories scoped to a file the agent opened",
          shown=False),
    _kind("memories_exported", "file ids kinds", "errand memory export wrote the approved memories into a file"),
    _kind("memory_unavailable", "reason", "project memory could not be read; the round goes on without it"),
    _kind("memory_proposed", "id text", "the agent proposed a memory", shown=False),
    _kind("memories_proposed", "ids refused input_tokens output_tokens cache_read_tokens cache_write_tokens cost",
          "distilling proposed memories for a person to approve (its model call's usage counts in the figures)",
          shown=False),
    _kind("distill_failed", "reason", "distilling memories from the finished task failed", shown=False),
    _kind("distill_skipped", "budget reason", "distilling was not started: the run's budget had no room for it"),
    # the agent's steps
    _kind("model", f"{_AGENT} {_USAGE} content stop tool_calls", "the model's reply"),
    _kind("message", f"{_AGENT} content role tool_call_id", "a message of the conversation", shown=False),
    _kind("tool_call", f"{_AGENT} arguments id name malformed", "the agent called a tool"),
    _kind("output", f"{_AGENT} id text", "what a command printed", output=True),
    _kind("tool_result", f"{_AGENT} content exit_code id name ok", "a tool's result"),
    _kind("model_retry", f"{_AGENT} code delay max_retries reason retry retry_after status",
          "a model call failed and is retried"),
    _kind("condensed", f"{_AGENT} {_USAGE} dropped_messages dropped_steps first_message forced last_message "
          "reason summary tokens_after tokens_before window",
          "older steps were summarised to fit the model's window"),
    _kind("exit", f"{_AGENT} budget detail spent status", "the agent's run ended"),
    _kind("question", "text", "the agent asked a person and waits"),
    _kind("answer_delivered", "ref text", "the person's answer reached the agent"),
    _kind("message_delivered", f"{_AGENT} ref text", "a person's message reached the agent"),
    # the checks and the result
    _kind("check_started", "command what", "a check of the result begins"),
    _kind("check_skipped", "reason what", "a check of the result was not run again"),
    _kind("check_output", "text", "a line a check printed", output=True),
    _kind("ranking", "rule runs", "the attempts, best first"),
    _kind("ready_for_review", "confidence run_id", "the round ended with a diff to review"),
    _kind("answered", "report run_id", "the round ended with a report and no change (a question answered)"),
    _kind("failed", "code command exit_code log reason", "the round ended without a result"),
    _kind("recovered", "last_round previous reason rule run_id state",
          "an orphaned run was ended (its worker or workflow gone) and the task settled, with the reason"),
    # what people send and decide
    _kind("message_sent", "text", "a person's message for the agent"),
    _kind("answer_sent", "text", "a person's answer to the question"),
    _kind("cancelled", "", "a person cancelled the task"),
    _kind("retried", "after round", "a person ran the failed or cancelled task again"),
    _kind("followup", "attempt comments note text", "a person asked for more on the same branch"),
    _kind("followed_up", "comments note task_id text", "the follow-up continues as a new task"),
    _kind("rejected", "reason", "a person rejected the result"),
    _kind("accepted", "branch commit run_id", "a person accepted the result onto its branch"),
    _kind("credited", "email name", "the accepted commit credits this person (Co-authored-by): who asked"),
    _kind("prepared", "branch commit run_id", "the result was committed for a draft pull request, not yet accepted"),
)}

#: Streamed text: printed as it came, not as a sentence.
OUTPUT_KINDS = frozenset(kind.name for kind in KINDS.values() if kind.output)
#: What a person sends a running round; the engine delivers these to the agent.
CONTROL_KINDS = ("message_sent", "answer_sent")
#: What an engine serving many tasks reads across all of them, in the order of the events' ids:
#: the controls, and a cancel.
FORWARDED_KINDS = (*CONTROL_KINDS, "cancelled")


def declared(kind: str) -> Kind | None:
    return KINDS.get(kind)


# ---------------------------------------------------------------- reading a log back


def data_of(event: Event) -> dict[str, Any]:
    """An event's data whole, for a renderer that shows every kind (``{}`` for a row whose data
    is not an object); a reader of one kind takes its typed reader below instead."""
    return event.data if isinstance(event.data, dict) else {}


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _optional(value: object) -> str | None:
    return None if value is None else str(value)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ids(value: object) -> tuple[int, ...]:
    """Memory ids as a list of them was written (numbers; a digit string of an old row too)."""
    items = value if isinstance(value, list | tuple) else ()
    return tuple(int(item) for item in items if _int(item) is not None or (isinstance(item, str) and item.isdigit()))


def text_of(event: Event) -> str:
    """The text of a kind that carries one — ``question``, ``answer_sent``, ``answer_delivered``,
    ``message_sent``, ``message_delivered``, ``followup`` and the streamed output kinds; ``""``
    when the row has none."""
    return _text(data_of(event).get("text"))


@dataclass(frozen=True)
class Committed:
    """``accepted`` (a person accepted run ``run_id``'s diff as ``commit`` on ``branch``) or
    ``prepared`` (that commit was written for a draft pull request, not yet accepted)."""

    run_id: str
    branch: str | None
    commit: str

    @classmethod
    def of(cls, event: Event) -> Committed:
        data = data_of(event)
        return cls(_text(data.get("run_id")), _optional(data.get("branch")), _text(data.get("commit")))

    def to_data(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "branch": self.branch, "commit": self.commit}


@dataclass(frozen=True)
class Credited:
    """``credited``: the accepted commit names this person as a co-author."""

    name: str
    email: str

    @classmethod
    def of(cls, event: Event) -> Credited:
        data = data_of(event)
        return cls(_text(data.get("name")), _text(data.get("email")))

    def to_data(self) -> dict[str, Any]:
        return {"name": self.name, "email": self.email}


@dataclass(frozen=True)
class Answered:
    """``answered``: the round changed no file and ended with ``report``."""

    report: str
    run_id: str | None = None

    @classmethod
    def of(cls, event: Event) -> Answered:
        data = data_of(event)
        return cls(_text(data.get("report")), _optional(data.get("run_id")))


@dataclass(frozen=True)
class Failed:
    """``failed``: the round ended without a result, for ``reason`` (``code`` to branch on)."""

    reason: str
    code: str | None = None

    @classmethod
    def of(cls, event: Event) -> Failed:
        data = data_of(event)
        if event.kind == "recovered":  # recovery failed the task: its rounds were cut short again and again
            return cls(f"{_text(data.get('reason'))}; its round was cut short again in a row, so the task was "
                       "failed rather than queued again (`errand retry` runs it again)", "interrupted_again")
        return cls(_text(data.get("reason")), _optional(data.get("code")))

    @classmethod
    def last(cls, events: Sequence[Event]) -> Failed | None:
        """Why the task failed, from its ``failed`` and ``recovered`` events: the last that failed it
        (a recovery that moved it from an active state to ``failed``; not one that left it failed)."""
        for event in reversed(events):
            data = data_of(event)
            if event.kind == "failed" or (event.kind == "recovered" and data.get("state") == "failed"
                                          and data.get("previous") not in ("failed", None)):
                return cls.of(event)
        return None


@dataclass(frozen=True)
class Recovered:
    """``recovered``: the task was moved from ``previous`` to ``state`` as a run left running
    (``run_id``) was ended, or as its round was found lost with no run running, for ``reason`` by
    ``rule``. A task queued again with no run running carries ``last_round``, the number of its
    last round begun then (0: none): a later recovery tells by it that no run began since."""

    previous: str | None
    state: str | None
    reason: str = ""
    rule: str = ""
    run_id: str | None = None
    last_round: int | None = None

    @classmethod
    def of(cls, event: Event) -> Recovered:
        data = data_of(event)
        return cls(_optional(data.get("previous")), _optional(data.get("state")), _text(data.get("reason")),
                   _text(data.get("rule")), _optional(data.get("run_id")), _int(data.get("last_round")))

    def to_data(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "previous": self.previous, "state": self.state, "reason": self.reason,
                "rule": self.rule, **({"last_round": self.last_round} if self.last_round is not None else {})}

    def lost_before_a_run(self, last_round: int) -> bool:
        """Whether this recovery queued the task again, with no run running, when ``last_round``
        was already its last round begun: its round was lost before a run of it began."""
        return self.run_id is None and self.state == "queued" and self.last_round == last_round


@dataclass(frozen=True)
class Rejected:
    """``rejected``: a person rejected the result, for ``reason``."""

    reason: str

    @classmethod
    def of(cls, event: Event) -> Rejected:
        return cls(_text(data_of(event).get("reason")))


@dataclass(frozen=True)
class MemoriesGiven:
    """``memories_given``: the memories (``ids``, each shown as its line of ``lines``) the agent
    was given, and those of them marked ``stale`` (their evidence changed since)."""

    ids: tuple[int, ...]
    lines: tuple[str, ...]
    stale: tuple[int, ...] = ()

    @classmethod
    def of(cls, event: Event) -> MemoriesGiven:
        data = data_of(event)
        lines = data.get("lines")
        return cls(_ids(data.get("ids")), tuple(_text(line) for line in lines) if isinstance(lines, list) else (),
                   _ids(data.get("stale")))


@dataclass(frozen=True)
class ToolCalled:
    """``tool_call``: the agent called tool ``name`` with ``arguments`` (an object, or what the
    model sent where it was ``malformed``)."""

    id: str
    name: str
    arguments: object = None
    malformed: str | None = None

    @classmethod
    def of(cls, event: Event) -> ToolCalled:
        data = data_of(event)
        return cls(_text(data.get("id")), _text(data.get("name")), data.get("arguments"),
                   _optional(data.get("malformed") or None))


@dataclass(frozen=True)
class ToolReturned:
    """``tool_result``: what call ``id`` of tool ``name`` gave back."""

    id: str
    name: str
    ok: bool
    exit_code: int | None = None
    content: str = ""

    @classmethod
    def of(cls, event: Event) -> ToolReturned:
        data = data_of(event)
        return cls(_text(data.get("id")), _text(data.get("name")), bool(data.get("ok")), _int(data.get("exit_code")),
                   _text(data.get("content")))


@dataclass(frozen=True)
class EnvironmentUsed:
    """``environment``: what shapes the round; only its ``budgets`` are read back."""

    budgets: Mapping[str, float | int | None]

    @classmethod
    def of(cls, event: Event) -> EnvironmentUsed:
        budgets = data_of(event).get("budgets")
        return cls(dict(budgets) if isinstance(budgets, Mapping) else {})


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _price(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class CallUsage:
    """What one model call used, as its event carries it (``model``, ``condensed``,
    ``memories_proposed``). ``cost`` is None when its provider named no price; ``reported`` is
    false for an event that carries no usage at all (a distillation that made no call)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: float | None = None
    reported: bool = False

    @classmethod
    def of(cls, event: Event) -> CallUsage:
        return cls.from_data(event.data)

    @classmethod
    def from_data(cls, data: object) -> CallUsage:
        """Of an event's data as a row holds it (a tally reads rows, not events)."""
        if not isinstance(data, dict):
            return cls()
        cost = data.get("cost")
        return cls(_count(data.get("input_tokens")), _count(data.get("output_tokens")),
                   _count(data.get("cached_tokens", data.get("cache_read_tokens"))),  # an old row's name
                   _count(data.get("cache_write_tokens")), _price(cost),
                   "input_tokens" in data)


@dataclass(frozen=True)
class EgressSeen:
    """``egress``: what a sandbox reached through its egress proxy; read back, the refusals:
    those it lists (``refused``, the newest few) and how many more it only counts."""

    refused: tuple[object, ...] = ()
    more_refused: int = 0

    @property
    def refusals(self) -> int:
        return len(self.refused) + self.more_refused

    @classmethod
    def from_data(cls, data: object) -> EgressSeen:
        """Of an event's data as a row holds it (a tally reads rows, not events)."""
        if not isinstance(data, dict):
            return cls()
        listed = data.get("refused")
        return cls(tuple(listed) if isinstance(listed, list) else (), _count(data.get("more_refused")))


@dataclass(frozen=True)
class FollowupSaid:
    """What a person said in a follow-up, read back from its ``followup`` event: the note (the
    whole instruction when it had no line comments) and the comments."""

    note: str
    comments: tuple[LineComment, ...]
    attempt: int | None = None  # the attempt whose diff the comments are on, where the round had several

    @classmethod
    def of(cls, event: Event) -> FollowupSaid:
        data = data_of(event)
        comments = tuple(LineComment.from_json(c) for c in data.get("comments") or ())
        return cls(str(data.get("note") if comments else data.get("text") or ""), comments,
                   _int(data.get("attempt")))


def followup_data(instruction: str, note: str, comments: Sequence[LineComment],
                  attempt: int | None = None) -> dict[str, Any]:
    """A follow-up as the conversation keeps it: the instruction as sent (``text``, what a person
    reads in ``errand logs`` and on the page) and, with comments, the overall note, each comment
    as data, and the attempt whose diff they are on (where the round had a choice)."""
    if not comments:
        return {"text": instruction}
    on = {} if attempt is None else {"attempt": attempt}
    return {"text": instruction, "note": note, "comments": [c.to_json() for c in comments], **on}
