"""The log's vocabulary is declared once: both renderers speak exactly the declared kinds, and
what is read back out of a log is read by one typed reader per kind, whatever the row holds."""

from __future__ import annotations

from dataclasses import fields

import pytest

from errand.cli.events import EVENT_LINES
from errand.server.eventview import RENDER
from errand.tasks.comments import LineComment
from errand.tasks.events import (
    KINDS,
    OUTPUT_KINDS,
    Answered,
    CallUsage,
    Committed,
    Credited,
    EgressSeen,
    EnvironmentUsed,
    Failed,
    FollowupSaid,
    MemoriesGiven,
    Recovered,
    Rejected,
    ToolCalled,
    ToolReturned,
    data_of,
    followup_data,
    text_of,
)
from errand.tasks.records import Event

SHOWN = {name for name, kind in KINDS.items() if kind.shown and not kind.output}


def test_the_command_line_renders_every_shown_kind_and_no_other() -> None:
    assert set(EVENT_LINES) - OUTPUT_KINDS == SHOWN


def test_the_web_log_renders_every_shown_kind_and_no_other() -> None:
    assert set(RENDER) == SHOWN


# ---------------------------------------------------------------- the readers, on old and odd rows


def _event(kind: str, data: object, run_id: str | None = None) -> Event:
    return Event(1, "t-1", run_id, None, 0.0, kind, data)


READERS: dict[type, tuple[str, ...]] = {
    Committed: ("accepted", "prepared"), Credited: ("credited",), Answered: ("answered",), Failed: ("failed",),
    Rejected: ("rejected",), Recovered: ("recovered",), MemoriesGiven: ("memories_given",), ToolCalled: ("tool_call",),
    ToolReturned: ("tool_result",), EnvironmentUsed: ("environment",), FollowupSaid: ("followup",),
}


@pytest.mark.parametrize("reader", list(READERS), ids=lambda reader: reader.__name__)
def test_a_reader_reads_only_fields_its_kinds_declare(reader: type) -> None:
    names = {f.name for f in fields(reader)}
    for kind in READERS[reader]:
        assert names <= KINDS[kind].fields, (kind, names - KINDS[kind].fields)


def test_call_usage_reads_declared_usage_fields() -> None:
    names = {f.name for f in fields(CallUsage)} - {"reported"}
    for kind in ("model", "condensed", "memories_proposed"):
        assert names <= KINDS[kind].fields


@pytest.mark.parametrize("data", [None, [], "text", 3, {}], ids=repr)
def test_a_row_whose_data_is_not_an_object_reads_as_defaults(data: object) -> None:
    """Every reader takes any row: what it cannot find reads as the field's default."""
    assert data_of(_event("accepted", data)) == {}
    assert text_of(_event("question", data)) == ""
    assert Committed.of(_event("accepted", data)) == Committed("", None, "")
    assert Credited.of(_event("credited", data)) == Credited("", "")
    assert Answered.of(_event("answered", data)) == Answered("")
    assert Failed.of(_event("failed", data)) == Failed("")
    assert Rejected.of(_event("rejected", data)) == Rejected("")
    assert Recovered.of(_event("recovered", data)) == Recovered(None, None)
    assert MemoriesGiven.of(_event("memories_given", data)) == MemoriesGiven((), ())
    assert ToolCalled.of(_event("tool_call", data)) == ToolCalled("", "")
    assert ToolReturned.of(_event("tool_result", data)) == ToolReturned("", "", False)
    assert EnvironmentUsed.of(_event("environment", data)) == EnvironmentUsed({})
    assert CallUsage.of(_event("model", data)) == CallUsage()
    assert EgressSeen.from_data(data) == EgressSeen()
    assert FollowupSaid.of(_event("followup", data)) == FollowupSaid("", ())


def test_what_a_writer_wrote_reads_back() -> None:
    accepted = Committed("r-1", "errand/t-1-x", "abc123")
    assert Committed.of(_event("accepted", accepted.to_data())) == accepted
    assert Credited.of(_event("credited", Credited("Ada", "ada@example.org").to_data())) == Credited(
        "Ada", "ada@example.org")
    comment = LineComment("calc.py", 2, 3, "why?", "new", "ada")
    said = FollowupSaid.of(_event("followup", followup_data("do more\n\ncalc.py:2-3", "do more", [comment], 2)))
    assert said == FollowupSaid("do more", (comment,), 2)
    assert FollowupSaid.of(_event("followup", followup_data("plain", "", []))) == FollowupSaid("plain", ())


def test_fields_of_the_wrong_type_read_as_defaults() -> None:
    assert text_of(_event("question", {"text": None})) == ""
    assert text_of(_event("answer_sent", {"text": 42})) == "42"
    assert Committed.of(_event("accepted", {"run_id": None, "branch": None, "commit": None})) == Committed("", None, "")
    assert ToolReturned.of(_event("tool_result", {"id": 7, "ok": 1, "exit_code": "2", "content": None})) == \
        ToolReturned("7", "", True, None, "")
    assert ToolReturned.of(_event("tool_result", {"exit_code": True})).exit_code is None  # a bool is no exit code
    assert ToolCalled.of(_event("tool_call", {"name": "shell", "arguments": "{not json", "malformed": ""})) == \
        ToolCalled("", "shell", "{not json", None)
    assert EnvironmentUsed.of(_event("environment", {"budgets": ["max_steps"]})).budgets == {}
    assert FollowupSaid.of(_event("followup", {"text": "t", "comments": [], "attempt": True})).attempt is None


def test_memories_given_of_an_old_row() -> None:
    """Rows from before ``stale`` have none; ids written as strings still read as ids; what is no id is skipped."""
    old = MemoriesGiven.of(_event("memories_given", {"ids": [3, "4", "x", True, None], "lines": ["a", 5]}))
    assert old == MemoriesGiven((3, 4), ("a", "5"), ())
    assert MemoriesGiven.of(_event("memories_given", {"ids": [1], "lines": ["a"], "stale": [1]})).stale == (1,)
    assert MemoriesGiven.of(_event("memories_given", {"ids": 1, "lines": "a"})) == MemoriesGiven((), ())


def test_call_usage_of_old_and_partial_rows() -> None:
    """An old row named the cache reads ``cached_tokens``; a row without a price is a call of
    unknown cost; a row with no usage at all (a distillation that made no call) is not reported."""
    old = CallUsage.of(_event("model", {"input_tokens": 10, "output_tokens": 2, "cached_tokens": 4, "cost": 0}))
    assert old == CallUsage(10, 2, 4, 0, 0.0, True)
    assert CallUsage.of(_event("model", {"input_tokens": 5, "cache_read_tokens": 3, "cost": None})) == \
        CallUsage(5, 0, 3, 0, None, True)
    assert CallUsage.of(_event("model", {"input_tokens": -1, "output_tokens": True, "cost": "1"})) == \
        CallUsage(0, 0, 0, 0, None, True)
    assert CallUsage.of(_event("model", {"input_tokens": 1, "cost": True})).cost is None  # true is no price
    assert not CallUsage.of(_event("memories_proposed", {"ids": [1], "refused": []})).reported


def test_egress_refusals_count_the_listed_and_the_counted() -> None:
    seen = EgressSeen.from_data({"refused": [{"host": "a"}, {"host": "b"}], "more_refused": 5, "hosts": ["c"]})
    assert seen.refusals == 7
    assert EgressSeen.from_data({"refused": "a", "more_refused": -2}).refusals == 0
    assert {f.name for f in fields(EgressSeen)} <= KINDS["egress"].fields


def test_why_a_task_failed_is_read_from_the_recovery_that_failed_it_too() -> None:
    """A task failed by recovery (its round cut short again in a row) has no ``failed`` event: its
    reason is the ``recovered`` event's, and a later recovery that left it failed does not hide it."""
    first = Event(1, "t-1", None, None, 0.0, "failed", {"reason": "tests failed", "code": "checks"})
    gave_up = Event(2, "t-1", None, None, 0.0, "recovered",
                    {"previous": "running", "state": "failed", "reason": "the database could not be reached"})
    stayed = Event(3, "t-1", None, None, 0.0, "recovered",
                   {"previous": "failed", "state": "failed", "reason": "run t-1-r2 ended"})
    requeued = Event(4, "t-1", None, None, 0.0, "recovered", {"previous": "running", "state": "queued", "reason": "x"})
    said = Failed.last([first, gave_up, stayed, requeued])
    assert said is not None and said.reason.startswith("the database could not be reached; its round was cut short")
    assert said.code == "interrupted_again"
    assert Failed.last([first, requeued]) == Failed("tests failed", "checks")
    assert Failed.last([requeued]) is None


def test_a_recovery_that_queued_a_task_with_no_run_reads_back_and_says_so() -> None:
    """The store counts these (run_id None, queued, at the same last round) to bound a task whose
    round is lost before a run every time; an old row, without ``last_round``, is not one of them."""
    requeued = Recovered("preparing", "queued", "its worker w1 ended", "queued again", last_round=2)
    assert Recovered.of(_event("recovered", requeued.to_data())) == requeued
    assert requeued.lost_before_a_run(2) and not requeued.lost_before_a_run(3)
    interrupted = {"run_id": "t-1-r2", "previous": "running", "state": "queued", "last_round": 2}
    assert not Recovered.of(_event("recovered", interrupted)).lost_before_a_run(2)
    assert not Recovered.of(_event("recovered", {"run_id": None, "state": "queued"})).lost_before_a_run(0)
    assert not Recovered.of(_event("recovered", {"state": "queued", "last_round": True})).lost_before_a_run(1)
