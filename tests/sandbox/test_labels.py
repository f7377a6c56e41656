"""Labels: given at create, kept in the sandbox's record, listed by the Python API (both
flavours), by another process and by ``errand sandbox ls``; bad ones are refused first."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from errand import AsyncSandbox, Sandbox
from errand.cli import app
from errand.errors import ConfigError

LABELS = {"task": "t-0a1b2c3d", "run": "t-0a1b2c3d-r1"}
runner = CliRunner()


def _live() -> set[str]:
    return {info.id for info in Sandbox.list()}


async def test_labels_round_trip_through_list_and_another_process() -> None:
    sandbox = await AsyncSandbox.create(timeout=60, labels=LABELS)
    try:
        [info] = [i for i in await AsyncSandbox.list() if i.id == sandbox.id]
        assert info.labels == LABELS
        listed = subprocess.run([sys.executable, "-m", "errand.cli", "sandbox", "ls", "--json"],
                                capture_output=True, text=True, check=True).stdout
        [entry] = [e for e in json.loads(listed) if e["id"] == sandbox.id]
        assert entry["labels"] == LABELS
    finally:
        await sandbox.terminate()


def test_the_blocking_api_lists_labels_and_unlabelled_sandboxes_have_none(backend: str) -> None:
    with Sandbox.create(timeout=60, isolation=backend, labels=LABELS) as labelled, \
            Sandbox.create(timeout=60, isolation=backend) as plain:
        found = {info.id: info.labels for info in Sandbox.list()}
        assert found[labelled.id] == LABELS and found[plain.id] == {}


def test_labels_at_their_limits_are_taken() -> None:
    widest = {"k" + "e" * 62: "v" * 128, **{f"l{n}": f"{n}:x@y.z+1=2_-" for n in range(15)}}
    with Sandbox.create(timeout=60, labels=widest) as sandbox:
        [info] = [i for i in Sandbox.list() if i.id == sandbox.id]
        assert info.labels == widest


BAD_LABELS: dict[str, Any] = {
    "uppercase_key": {"Task": "t-1"},
    "empty_key": {"": "x"},
    "key_starts_with_digit": {"1task": "x"},
    "key_too_long": {"k" * 64: "x"},
    "empty_value": {"task": ""},
    "value_too_long": {"task": "v" * 129},
    "value_with_space": {"task": "t 1"},
    "value_with_escape": {"task": "\x1b[2Jt-1"},
    "value_with_slash": {"task": "../sandboxes"},
    "value_not_a_string": {"task": 1},
    "key_not_a_string": {1: "x"},
    "not_a_mapping": [("task", "t-1")],
    "too_many": {f"l{n}": "x" for n in range(17)},
}


@pytest.mark.parametrize("case", list(BAD_LABELS))
def test_bad_labels_are_refused_and_create_nothing(case: str) -> None:
    before = _live()
    with pytest.raises(ConfigError) as caught:
        Sandbox.create(timeout=60, labels=BAD_LABELS[case]).terminate()
    assert caught.value.code == "invalid_label" and str(caught.value)
    assert _live() == before


def _cli(*args: str) -> Any:
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_the_command_line_labels_and_lists_them() -> None:
    created = _cli("sandbox", "create", "--timeout", "60", "--label", "task=t-0a1b2c3d", "--label", "run=t-0a1b2c3d-r1")
    assert created.exit_code == 0, created.output
    sandbox_id = created.stdout.strip()
    try:
        table = _cli("sandbox", "ls")
        header, *rows = table.stdout.splitlines()
        [row] = [line for line in rows if line.split()[0] == sandbox_id]
        assert header.split()[-1] == "LABELS" and row.split()[-2:] == ["task=t-0a1b2c3d", "run=t-0a1b2c3d-r1"]
        listed = json.loads(_cli("sandbox", "ls", "--json").stdout)
        assert [e["labels"] for e in listed if e["id"] == sandbox_id] == [LABELS]
    finally:
        _cli("sandbox", "rm", "--yes", sandbox_id)


REFUSALS: list[tuple[list[str], Callable[[str], bool]]] = [
    (["--label", "task"], lambda err: err == "error: --label takes KEY=VALUE, not 'task'\n"),
    (["--label", "Task=t-1"], lambda err: err.startswith("error: label name 'Task' must be")),
    (["--label", "task=t 1"], lambda err: err.startswith("error: label task's value 't 1' must be")),
]


@pytest.mark.parametrize(("args", "says"), REFUSALS, ids=["no_equals", "bad_key", "bad_value"])
def test_the_command_line_refuses_bad_labels(args: list[str], says: Callable[[str], bool]) -> None:
    before = _live()
    refused = _cli("sandbox", "create", *args)
    assert refused.exit_code == 2 and says(refused.stderr), refused.stderr
    assert _live() == before
