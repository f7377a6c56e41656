"""One table of errors on the wire: what the server sends, its client rebuilds as the same error."""

from __future__ import annotations

import inspect
import json

import pytest

from errand.errors import ConfigError, ErrandError, SandboxNotFound
from errand.memory.errors import SecretRefused
from errand.server.codes import ERRORS, ServerError, error_from, status_of
from errand.server.problems import from_error
from errand.tasks.errors import IllegalTransition, StateConflict, TaskError, WrongState

SAMPLES: list[ErrandError] = [
    WrongState("answer needs needs_input", task_id="t1", state="running"),
    IllegalTransition("no", current="ready", target="running", task_id="t1"),
    StateConflict("lost", task_id="t1", expected="queued", actual="running"),
    SandboxNotFound("gone", sandbox_id="sb-1"),
    SecretRefused("looks like a key", detector="aws"),
    ConfigError("bad option", code="bad_option"),
]


def _over_the_wire(error: ErrandError) -> ErrandError:
    response = from_error(error)
    return error_from(response.status_code, json.loads(bytes(response.body)))


@pytest.mark.parametrize("error", SAMPLES, ids=lambda e: type(e).__name__)
def test_an_error_sent_is_rebuilt_as_the_same_class_with_its_fields(error: ErrandError) -> None:
    again = _over_the_wire(error)
    assert type(again) is type(error)
    assert (again.message, again.code) == (error.message, error.code)
    assert {k: v for k, v in vars(again).items() if k != "args"} == {k: v for k, v in vars(error).items()
                                                                     if k != "args"}


def test_every_class_of_the_table_round_trips() -> None:
    for kind, status in ERRORS:
        assert status_of(_built(kind)) == status
        assert type(_over_the_wire(_built(kind))) is kind


def test_an_unknown_code_lands_in_its_family() -> None:
    assert type(_over_the_wire(TaskError("odd", task_id="t9", code="no_result"))) is TaskError
    assert _over_the_wire(TaskError("odd", task_id="t9", code="no_result")).code == "no_result"
    assert type(error_from(422, {"detail": "x", "code": "invalid_request"})) is ConfigError
    assert type(error_from(500, {"detail": "boom", "code": "internal_error"})) is ServerError


def _built(kind: type[ErrandError]) -> ErrandError:
    sample = {type(error): error for error in SAMPLES}.get(kind)
    if sample is not None:
        return sample
    fields = {"task_id": "t1", "sandbox_id": "sb-1", "memory_id": "m1", "detector": "d"}
    wanted = {name: fields.get(name, "x") for name, p in inspect.signature(kind.__init__).parameters.items()
              if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty}
    return kind("sample", **wanted)
