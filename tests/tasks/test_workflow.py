"""The task's workflow without a Temporal service: its signals, each counted once however often the
dispatcher sends it, and the decision table that reads how an activity ended into how the round
ended — row by row."""

from __future__ import annotations

from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeout

from errand.tasks.engines.temporal.workflow import (
    ROUND_CANCELLED,
    ROUND_FAILED,
    RUN_LOST,
    START_STALE,
    WORKER_STOPPED,
    TaskWorkflow,
    _ended,
)
from errand.tasks.round.order import Begun

BEGUN = {"task_id": "t-1", "round": 2, "run_ids": ["r-1", "r-2"], "model": {"provider": "openai", "model": "m"},
         "holder": "errand-worker-a"}


def ended(cause: BaseException | None, *, cancelled: bool = False) -> tuple[str, str, Begun | None, str | None]:
    error = ActivityError("activity failed", scheduled_event_id=1, started_event_id=2, identity="w",
                          activity_type="errand.attempt", activity_id="1", retry_state=None)
    error.__cause__ = cause
    found = _ended(error, cancelled)
    return found.how, found.reason, found.begun, found.silent


def test_a_round_is_wanted_once_per_dispatch_however_often_it_is_sent() -> None:
    flow = TaskWorkflow()
    for dispatch in (7, 7, 8, 7):
        flow.round_wanted(dispatch)
    flow.round_wanted(None)  # a dispatcher from before the outbox: each signal is a round
    flow.round_wanted(None)
    assert flow.wanted == 4 and flow.claims == [7, 8, None, None]


def test_messages_and_answers_count_once_by_their_reference_and_cancel_is_kept() -> None:
    flow = TaskWorkflow()
    flow.message("use pytest", 1)
    flow.message("use pytest", 1)  # said again after the dispatcher's restart
    flow.answer("yes", 2)
    flow.answer("yes", 2)
    flow.answer("no", 1)  # a reference already seen, as a message
    assert flow.messages == [("use pytest", 1)] and flow.answers == [("yes", 2)] and flow.deliveries == []
    assert not flow.cancelled
    flow.cancel()
    assert flow.cancelled


def test_how_an_activity_ended_is_how_the_round_ended() -> None:
    assert ended(CancelledError()) == ("cancelled", "", None, None)
    assert ended(ApplicationError("x"), cancelled=True)[0] == "cancelled"
    assert ended(ApplicationError("cancelled", BEGUN, type=ROUND_CANCELLED))[:1] == ("cancelled",)
    assert ended(ActivityTimeout("silent", type=TimeoutType.HEARTBEAT, last_heartbeat_details=[])) == (
        "interrupted", "the worker running errand.attempt stopped answering (heartbeat)", None, "heartbeat")
    assert ended(ApplicationError("stopped", type=WORKER_STOPPED))[:2] == (
        "interrupted", "the worker running errand.attempt was stopped")
    assert ended(ApplicationError("its runs were taken", type=RUN_LOST))[:2] == ("interrupted", "its runs were taken")
    assert ended(ApplicationError("the task moved on", BEGUN, type=START_STALE)) == (
        "stale", "the task moved on", None, None)  # nothing began, whatever it said
    assert ended(ApplicationError("tests broke", type=ROUND_FAILED))[:2] == ("failed_already", "tests broke")
    assert ended(ValueError("a bug"))[:2] == ("failed", "a bug")
    assert ended(None)[:2] == ("failed", "activity failed")


def test_what_the_start_began_is_read_from_its_heartbeat_or_its_error() -> None:
    begun = Begun("t-1", 2, ("r-1", "r-2"), {"provider": "openai", "model": "m"}, "errand-worker-a")
    assert ended(ActivityTimeout("silent", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[BEGUN]))[2:] == (
        begun, "start_to_close")
    assert ended(ApplicationError("cancelled", BEGUN, type=ROUND_CANCELLED))[2] == begun
    assert ended(ApplicationError("lost", {"task_id": "t-1"}, type=RUN_LOST))[2] is None  # no run ids: not a start's
