"""What the task and review pages show beyond the raw records: which round and attempt a
run is, the sandboxes a task runs in now, the conversation with the agent, why a task
failed, what to do after accepting, and how the attempts of a round differ.

Each is read from the store (and, for sandboxes, the live registry) when a page is drawn,
so the pages show what the API shows.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from errand.errors import ErrandError
from errand.repo.git import run_git
from errand.repo.workcopy import is_url
from errand.sandbox import AsyncSandbox, SandboxInfo, SandboxUsage
from errand.server import diffview
from errand.tasks.events import Answered, Committed, Failed, Rejected, ToolCalled, ToolReturned, text_of
from errand.tasks.evidence import Evidence
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Event, Run, Task
from errand.tasks.round.steps import base_checkout, rank_key

__all__ = ["Attempt", "Cause", "Exchange", "FileRow", "LiveSandbox", "LogReads", "NextSteps", "RunNames", "base_text",
           "cause", "compare", "conversation", "file_matrix", "next_steps", "report", "task_sandboxes"]

CONVERSATION_KINDS = ("question", "answer_sent", "message_sent", "followup", "rejected")


class LogReads(Protocol):
    """What these views read of a task's log: the task service (or its store) answers it."""

    def events(self, task_id: str, after_id: int = 0, limit: int = 1000, *,
               kinds: Sequence[str] | None = None) -> list[Event]: ...

    def last_event(self, task_id: str, kinds: Sequence[str]) -> Event | None: ...


@dataclass(frozen=True)
class RunNames:
    """Run id → (round, attempt), and whether the task has several attempts a round."""

    rounds: dict[str, tuple[int, int]]
    several: bool

    @classmethod
    def of(cls, task: Task, runs: list[Run]) -> RunNames:
        return cls({run.id: (run.round, run.attempt) for run in runs}, task.attempts > 1)

    def known(self, run_id: str | None) -> bool:
        return run_id is None or run_id in self.rounds

    def tag(self, run_id: str | None) -> str:
        """How the log labels a run's line: its attempt when the round has several."""
        if run_id is None or run_id not in self.rounds or not self.several:
            return ""
        return f"#{self.rounds[run_id][1]}"


@dataclass(frozen=True)
class LiveSandbox:
    info: SandboxInfo
    usage: SandboxUsage | None

    @property
    def role(self) -> str:
        return self.info.labels.get("role", "")


async def task_sandboxes(task_id: str | None = None) -> list[LiveSandbox]:
    """The live sandboxes (of one task, when named), with what each uses now."""
    found = []
    for info in await AsyncSandbox.list():
        if task_id is not None and info.labels.get("task") != task_id:
            continue
        found.append(LiveSandbox(info, await _usage(info)))
    return found


async def _usage(info: SandboxInfo) -> SandboxUsage | None:
    try:
        sandbox = await AsyncSandbox.from_id(info.id)
    except ErrandError:
        return None  # it ended while we looked
    try:
        return sandbox.usage()
    except ErrandError:
        return None
    finally:
        await sandbox.close()


@dataclass(frozen=True)
class Exchange:
    """One turn between people and the agent: its question, an answer, a message, a
    follow-up or a rejection's reason."""

    kind: str
    who: str
    text: str
    time: float
    run_id: str | None


def conversation(log: LogReads, task_id: str) -> list[Exchange]:
    who = {"question": "The agent asked", "answer_sent": "You answered", "message_sent": "You said",
           "followup": "You asked for more", "rejected": "You rejected it"}
    exchanges = []
    for event in log.events(task_id, 0, 100_000, kinds=CONVERSATION_KINDS):
        text = Rejected.of(event).reason if event.kind == "rejected" else text_of(event)
        exchanges.append(Exchange(event.kind, who[event.kind], text, event.time, event.run_id))
    return exchanges


@dataclass(frozen=True)
class Cause:
    """Why a task failed, with the last command that failed on the way, its output's end."""

    reason: str
    command: str | None = None
    exit_code: int | None = None
    output: str = ""


def cause(log: LogReads, task: Task) -> Cause | None:
    """Of a failed task: the reason, and the last command of its last round that failed."""
    failed = (Failed.last(log.events(task.id, 0, 1_000_000, kinds=["failed", "recovered"]))
              if task.state is TaskState.FAILED else None)
    if failed is None:
        return None
    reason = failed.reason or "the task failed"
    round_started = log.last_event(task.id, ["round_started"])
    calls: dict[str, str] = {}
    last: tuple[ToolReturned, str] | None = None
    since = round_started.id if round_started is not None else 0
    for event in log.events(task.id, since, 1_000_000, kinds=["tool_call", "tool_result"]):
        if event.kind == "tool_call":
            call = ToolCalled.of(event)
            calls[call.id] = _described(call)
        elif not (result := ToolReturned.of(event)).ok:
            last = (result, calls.get(result.id, result.name))
    if last is None:
        return Cause(reason)
    result, command = last
    lines = result.content.strip().splitlines()
    return Cause(reason, command, result.exit_code, "\n".join(lines[-8:]))


def _described(call: ToolCalled) -> str:
    arguments = call.arguments
    if not isinstance(arguments, dict):  # a malformed call's arguments, kept as the model sent them
        return f"{call.name} {str(arguments)[:80]}"
    if call.name == "shell":
        return str(arguments.get("command"))
    return f"{call.name} " + " ".join(f"{k}={v!r}"[:80] for k, v in arguments.items())


@dataclass(frozen=True)
class NextSteps:
    """What a person does with an accepted task's branch."""

    branch: str
    commit: str
    repo: str
    commands: list[str] = field(default_factory=list)


def report(log: LogReads, task: Task) -> str | None:
    """Of an answered task (it changed nothing and finished with a report): the report."""
    answered = log.last_event(task.id, ["answered"]) if task.state is TaskState.ANSWERED else None
    return (Answered.of(answered).report or None) if answered is not None else None


def next_steps(log: LogReads, task: Task) -> NextSteps | None:
    accepted = log.last_event(task.id, ["accepted"])
    if accepted is None:
        return None
    landed = Committed.of(accepted)
    branch, commit = str(landed.branch or task.branch), landed.commit
    where = [] if is_url(task.repo) else [f"cd {shlex.quote(task.repo)}"]
    commands = [*where, f"git log -1 --stat {shlex.quote(branch)}", f"git switch {shlex.quote(branch)}",
                f"git push -u origin {shlex.quote(branch)}",
                f"gh pr create --head {shlex.quote(branch)} --fill   # or open a pull request on your forge"]
    return NextSteps(branch, commit, task.repo, commands)


@dataclass(frozen=True)
class Attempt:
    """One finished attempt of a round as the review compares it."""

    run: Run
    rank: int
    evidence: Evidence | None
    patch: str
    same_as: int | None  # the better-ranked attempt whose diff is the same, if any
    why: list[str]  # what placed it where the ranking put it
    tied_with: int | None = None  # the better-ranked attempt equal to it on every measure (placed first by number)


def compare(runs: list[Run], evidences: list[Evidence | None]) -> list[Attempt]:
    """The round's attempts best first, each saying whose diff it repeats, which better-ranked
    attempt it ties with, and why it ranks so."""
    attempts: list[Attempt] = []
    keys: list[tuple[int, ...] | None] = []
    for run, evidence in zip(runs, evidences, strict=True):
        outcome = run.outcome
        patch = outcome.patch if outcome else ""
        same = next((a.run.attempt for a in attempts if a.patch == patch), None)
        key = rank_key(evidence) if evidence is not None and outcome is not None else None
        tied = next((a.run.attempt for a, other in zip(attempts, keys, strict=True) if key and other == key), None)
        attempts.append(Attempt(run, outcome.rank if outcome else 0, evidence, patch, same, _why(run, evidence),
                                tied))
        keys.append(key)
    return attempts


def ties(attempts: list[Attempt]) -> list[str]:
    """Each group of attempts equal on every measure, in words that name all of them and how
    they are placed (by attempt number, the lower first)."""
    groups: dict[int, list[int]] = {}
    for attempt in attempts:
        if attempt.tied_with is not None:
            groups.setdefault(attempt.tied_with, [attempt.tied_with]).append(attempt.run.attempt)
    said = []
    for numbers in groups.values():
        if len(numbers) == 2:
            said.append(f"Attempts {numbers[0]} and {numbers[1]} are equal on every measure: attempt {numbers[0]} is "
                        "placed first because its number is lower.")
        else:
            named = ", ".join(map(str, numbers[:-1])) + f" and {numbers[-1]}"
            order = ", then ".join(map(str, numbers))
            said.append(f"Attempts {named} are equal on every measure: they are placed by their numbers, the lower "
                        f"first ({order}).")
    return said


def _why(run: Run, evidence: Evidence | None) -> list[str]:
    outcome = run.outcome
    if evidence is None or outcome is None:
        reason = outcome.detail or outcome.status if outcome else (run.result or {}).get("reason")
        return [str(reason or "no evidence")]
    tests = evidence.tests_after
    return [
        f"finished with a change to {len(evidence.files)} file(s)" if evidence.files and outcome.status == "finished"
        else f"{outcome.status}: {outcome.detail or 'no change'}",
        "tests not run" if tests is None else f"tests after: {tests.describe()}",
        f"confidence {evidence.confidence.level}",
        f"{evidence.additions + evidence.deletions} changed lines",
    ]


@dataclass(frozen=True)
class FileRow:
    """One path any attempt changed, with each attempt's change to it (None: untouched)."""

    path: str
    cells: list[diffview.FileDiff | None]

    @property
    def same(self) -> bool:
        """Whether every attempt changed this path, all the same way."""
        return None not in self.cells and len({_file_text(cell) for cell in self.cells if cell is not None}) == 1


def file_matrix(attempts: list[Attempt]) -> list[FileRow]:
    """Per path any attempt changed, each attempt's change to it, highlighted: the rows of the
    comparison, so the attempts' changes to one file sit side by side."""
    per = [{f.path: f for f in diffview.highlight(diffview.parse(a.patch))} for a in attempts]
    paths = sorted({path for files in per for path in files})
    return [FileRow(path, [files.get(path) for files in per]) for path in paths]


def base_text(task: Task, path: str) -> str:
    """``path`` as the task's base commit has it, read from the host's own copy of the repository
    (never from an agent's working copy), with git's config, hooks and filters off."""
    host_git = base_checkout(task).parent / "host.git"
    text = run_git(["cat-file", "blob", f"refs/errand/base:{path}"], host_git, git_dir=host_git, untrusted=True)
    if "\0" in text:
        raise ErrandError(f"{path} is a binary file in the base; it has no lines to show", code="binary_file")
    return text


def _file_text(file: diffview.FileDiff) -> str:
    return "\n".join(f"{line.kind}:{line.text}" for line in file.lines if line.kind != "hunk")
