"""What the tests of each agent CLI as a task's agent share (test_claude_code.py, test_codex.py, …).

Each test plays the model on a loopback wire server speaking the CLI's wire;
the worker's model gateway stands between, the key in the worker's
environment as a real one would be, the CLI in the sandbox with a token of its
run's own. The model's first turn runs :func:`audit`, which looks for the key
everywhere the sandbox can read; the test then checks what came back.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from errand.sandbox import AsyncSandbox
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Run
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from models.provider_wire import Provider
from models.wire import Answer, Hang, Recorded, WireServer

from .harness import make_repo, running_engine, wait_for_state

FAILING = "python3 test_calc.py"
SUMMARY = "add() subtracted; now it adds, and the test passes."
FINAL = f"{SUMMARY}\n\nAssumptions:\n- only add() was wrong"
TOML = '[test]\ncommand = "python3 test_calc.py"\n'


@pytest.fixture
def wire() -> Iterator[WireServer]:
    server = WireServer().start()
    yield server
    server.stop()


@dataclass
class CliModel:
    """The wire server's responder: ``provider`` plays the model; the first request with tools gets
    ``refuse_first`` instead (a provider's bad day), when given; ``usages`` are those of the requests
    ``from_the_cli`` (not errand's own distilling on the host after the run)."""

    provider: Provider
    from_the_cli: Callable[[Recorded], bool]
    refuse_first: Answer | None = None
    usages: list[dict[str, Any]] = field(default_factory=list)
    refused: list[Recorded] = field(default_factory=list)

    def __call__(self, request: Recorded) -> Answer:
        if self.refuse_first is not None and not self.refused and (request.body or {}).get("tools"):
            self.refused.append(request)
            return self.refuse_first
        answer = self.provider(request)
        if self.from_the_cli(request):
            self.usages.append(self.provider.usages[-1])
        return answer


def audit(key: str) -> str:
    """A command that prints every environment and command line in the sandbox, and the files that
    hold the key (the key itself is not in the command: it is spelt backwards and turned round). A
    probe file it writes with the key shows the search finds what is there. No command substitution:
    Gemini CLI refuses a command with one."""
    backwards = key[::-1]
    return ("cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | sort -u; "
            "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done; "
            f"python3 -c \"print('{backwards}'[::-1])\" > /tmp/errand-audit-probe; "
            "grep -rIl -F -f /tmp/errand-audit-probe --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr "
            "--exclude-dir=dev / 2>/dev/null | sed 's/^/KEY-''FILE: /'; echo audit-done")


def assert_audit_clean(output: str, key: str, token_seen: str) -> None:
    """The audit ran to its end, saw the run's token where the CLI holds it (``token_seen``), and found
    the key nowhere: not in an environment, a command line, or a file but its own probe."""
    assert "audit-done" in output and token_seen in output, output[-2000:]
    assert key not in output
    assert [line for line in output.splitlines() if "KEY-FILE: " in line] == ["KEY-FILE: /tmp/errand-audit-probe"]


def submit(store: TaskStore, tmp_path: Path, *, toml: str = TOML, model: str = "anthropic:test-model",
           agent: str = "claude-code") -> str:
    repo = make_repo(tmp_path / "project", toml=toml)
    instruction = f"Make the failing test pass ({uuid.uuid4().hex[:8]})"
    task = TaskService(store).submit(instruction, repo=str(repo), model=model, agent=agent)
    assert task.agent == agent
    return task.id


async def run_task(store: TaskStore, tmp_path: Path, *, model: str, agent: str,
                   toml: str = TOML) -> tuple[str, TaskState, Run]:
    """Submit the fix to ``agent`` on ``model`` and run it to its end on a local engine: the task, its
    state, its run."""
    task_id = submit(store, tmp_path, toml=toml, model=model, agent=agent)
    async with running_engine(store, default_model=model):
        task = await wait_for_state(store, task_id, TaskState.READY_FOR_REVIEW, TaskState.FAILED, seconds=900)
    [run] = store.runs(task_id)
    return task_id, task.state, run


def assert_reviewable_fix(store: TaskStore, task_id: str, state: TaskState, run: Run, agent: str) -> None:
    """The task ended as a reviewable diff with its evidence: the tests failed on the base and pass after,
    the summary and assumptions are the CLI's last message's, and the round says which agent ran."""
    events = store.events(task_id, 0, 100_000)
    assert state is TaskState.READY_FOR_REVIEW, [(e.kind, e.data) for e in events][-10:]
    outcome = run.outcome
    assert outcome is not None and outcome.status == "finished"
    assert "+    return a + b" in outcome.patch and "-    return a - b" in outcome.patch
    assert outcome.summary == SUMMARY and outcome.assumptions == ["only add() was wrong"]
    evidence = outcome.evidence
    assert evidence["tests_before"]["exit_code"] != 0 and evidence["tests_after"]["exit_code"] == 0
    assert [f["path"] for f in evidence["files"]] == ["calc.py"]
    assert next(e for e in events if e.kind == "round_started").data["agent"] == agent
    assert [e.kind for e in events].count("exit") == 1


def assert_no_key_in_transcript(run: Run, key: str, route: str) -> None:
    """The gateway kept the run's calls as its transcript, without the key or the token."""
    transcript = (Path(os.environ["ERRAND_HOME"]) / "transcripts" / f"{run.id}.jsonl").read_text()
    assert route in transcript and key not in transcript and "errand-gw-" not in transcript


async def assert_hung_cli_stopped(store: TaskStore, tmp_path: Path, wire: WireServer, *, model: str,
                                  agent: str, minutes: float = 0.5) -> list[Recorded]:
    """A model that never answers: the CLI waits on it, printing nothing, until the run's time budget
    (``minutes``) stops it; nothing of the run is left. The requests the wire server saw."""
    wire.respond(lambda _request: Hang())
    toml = TOML + f"[agent]\nmax_minutes = {minutes:g}\n"
    task_id, state, run = await run_task(store, tmp_path, model=model, agent=agent, toml=toml)
    assert state is TaskState.FAILED
    assert run.result["status"] == "budget_exhausted" and run.result["budget"] == "seconds", run.result
    assert re.search(rf"{agent} had printed nothing for \d+s, and was stopped", run.result["detail"])
    await assert_nothing_left(store, task_id)
    return wire.requests


async def assert_nothing_left(store: TaskStore, task_id: str) -> None:
    """No sandbox of the task, no CLI process of it."""
    assert await task_sandboxes(task_id) == []
    assert cli_processes(task_id, store) == []


def cli_processes(task_id: str, store: TaskStore) -> list[str]:
    """Host processes that are this task's CLI (its prompt names the task's unique instruction)."""
    marker = store.get_task(task_id).instruction.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker in cmdline and state != "Z":
                found.append(cmdline.replace(b"\0", b" ").decode(errors="replace")[:200])
    return found


async def task_sandboxes(task_id: str) -> list[str]:
    return [info.id for info in await AsyncSandbox.list() if info.labels.get("task") == task_id]


def keyed(monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], unset: tuple[str, ...] = ()) -> None:
    """The worker's key and the task's endpoint (the wire server, as a provider's URL would be)."""
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    for name in unset:
        monkeypatch.delenv(name, raising=False)

