"""What people do with tasks, as one service the CLI and the HTTP API both call.

Every operation checks its input and the task's state first, and changes
nothing when it refuses. A person talks to a running task only through the
store — a message, an answer, a cancellation — so it reaches the task's worker
wherever that runs.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from errand import _settings
from errand.errors import ConfigError
from errand.models import Catalog, ModelEndpoint, ModelError, open_model
from errand.models.endpoint import CLI_ONLY_PROVIDERS
from errand.repo.accept import Signing, branch_at, write_commit
from errand.repo.errors import RepoError
from errand.repo.git import run_git
from errand.repo.workcopy import is_url, resolve_base, source_name
from errand.tasks.comments import LineComment, anchor, check_count
from errand.tasks.engines.workers import check_serves, running_worker
from errand.tasks.errors import NeedsConfirmation, TaskError, WrongState
from errand.tasks.events import Committed, Credited, followup_data, text_of
from errand.tasks.guards import accept_risks
from errand.tasks.lifecycle import ACTIVE, FINAL, TaskState
from errand.tasks.progress import Progress, progress
from errand.tasks.records import Event, Review, Run, RunState, Task, Verdict
from errand.tasks.refusals import landed, refused
from errand.tasks.round.defaults import CONFIG_FILE
from errand.tasks.store.reading import StoreReads
from errand.tasks.store.tasks import TaskStore

if TYPE_CHECKING:
    from errand.memory import MemoryStore
    from errand.tasks.round.environment import Environment

# The round's modules, memory's store and the agents' seam load where a method uses them: every
# errand command builds this service, and listing or showing tasks needs none of them.

__all__ = ["MAX_ATTEMPTS", "Accepted", "TaskService", "issue_instruction", "resolve_model"]

FOLLOW_POLL = 0.2  # seconds between reads of a followed task

_REVIEWABLE = frozenset({TaskState.READY_FOR_REVIEW})
# A follow-up starts a new round of the same task from these; from ``accepted``, a new task.
_FOLLOWABLE = frozenset({TaskState.READY_FOR_REVIEW, TaskState.REJECTED, TaskState.ANSWERED, TaskState.FAILED,
                         TaskState.CANCELLED})
_RETRYABLE = frozenset({TaskState.FAILED, TaskState.CANCELLED})

MAX_ATTEMPTS = 8
_OWN = object()
MAX_INSTRUCTION_BYTES = 100_000
MAX_TITLE = 72


@dataclass(frozen=True)
class Accepted:
    task_id: str
    run_id: str
    branch: str
    commit: str


class TaskService(StoreReads[TaskStore]):
    """Submit, steer and review tasks in ``store``."""

    def __init__(self, store: TaskStore, *, memory: MemoryStore | object | None = _OWN) -> None:
        """``memory`` learns from reviews (default: project memory on the store's database,
        opened when first needed; ``None``: no memory)."""
        self.store = store
        self._memory = memory

    @property
    def engine(self) -> sa.Engine:
        """The database the tasks are on: another layer's store (the forge's links) opens its tables there."""
        return self.store.engine

    @property
    def memory(self) -> MemoryStore | None:
        if self._memory is _OWN:
            from errand.memory import MemoryStore

            self._memory = MemoryStore(self.store.engine)
        return self._memory  # type: ignore[return-value]

    def _observe(self, task: Task, verdict: str, note: str | None) -> None:
        from errand.tasks.round.memory_link import observe_verdict

        observe_verdict(self.memory, task, verdict, note)

    def follow(self, task_id: str, *, settled: Collection[TaskState], after: int = 0) -> Iterator[Event]:
        """The task's events after ``after``, as they are written, until it is in a ``settled``
        state (the state is read before the events, so none written before it settled is missed)."""
        while True:
            task = self.store.get_task(task_id)
            for event in self.store.events(task_id, after, 1_000_000):
                after = event.id
                yield event
            if task.state in settled:
                return
            time.sleep(FOLLOW_POLL)

    # ------------------------------------------------------------ intake

    def submit(self, instruction: str, *, repo: str | Path, base: str = "HEAD", model: str | None = None,
               attempts: int = 1, title: str | None = None, agent: str | None = None,
               parent_id: str | None = None) -> Task:
        """Queue a task after checking everything it names: the repository, the ref, the
        repository's ``errand.toml`` at that ref, the model and the attempt count.

        ``model`` is a named model from errand's settings file or ``provider:model``
        (default: ``$ERRAND_MODEL``, then the file's ``model``). It is resolved here, in
        this process's environment, and the task records the endpoint it resolved to.
        ``agent`` is the agent that works it (:mod:`errand.agent.seam`; default: the
        errand.toml's ``[agent] kind`` at the base, then the settings file's ``agent``,
        then errand's own), recorded with the task too."""
        text = _instruction(instruction)
        if isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= MAX_ATTEMPTS:
            raise ConfigError(f"attempts must be a whole number from 1 to {MAX_ATTEMPTS}, not {attempts!r}",
                              code="invalid_attempts")
        source = source_name(repo)
        spec, endpoint = resolve_model(model)
        from errand.agent.seam import DEFAULT_KIND, agent_kind

        kind = agent_kind(agent, where="--agent") if agent is not None else None
        commit = resolve_base(source, base)
        environment = _check_config(Path(source), commit) if not is_url(source) else None
        check_serves(endpoint, running_worker())
        kind = kind or (environment.agent_kind if environment else None) or _default_agent()
        if kind == DEFAULT_KIND and endpoint.provider in CLI_ONLY_PROVIDERS:
            raise ConfigError(f"errand's own agent has no client for {endpoint.provider}'s API: run {spec} with an "
                              "agent CLI that speaks it (--agent gemini-cli)", code="model_mismatch")
        return self.store.create_task(title=_title(title, text), instruction=text, repo=source, base_ref=base,
                                      base_commit=commit, model=spec, model_endpoint=endpoint, attempts=attempts,
                                      parent_id=parent_id, agent=kind)

    # ------------------------------------------------------------ steering

    def message(self, task_id: str, text: str) -> int:
        """Send the running agent a message; it is delivered at its next step."""
        task = self.store.get_task(task_id)
        if task.state not in ACTIVE and task.state is not TaskState.QUEUED:
            raise WrongState(f"task {task_id} is {task.state}; messages go to queued or running tasks "
                             "(for finished work use `errand followup`)", task_id=task_id, state=task.state)
        return self.store.append_event(task_id, None, "message_sent", {"text": _text(text, "a message")})

    def answer(self, task_id: str, text: str) -> int:
        """Answer the question a task is waiting on; its run resumes."""
        task = self.store.get_task(task_id)
        if task.state is not TaskState.NEEDS_INPUT:
            raise WrongState(f"task {task_id} is {task.state}, not waiting for an answer", task_id=task_id,
                             state=task.state)
        return self.store.append_event(task_id, None, "answer_sent", {"text": _text(text, "an answer")})

    def cancel(self, task_id: str) -> Task:
        """Cancel the task. Its runs that a live worker holds are that worker's to end (it sees the
        cancel, ends their sandboxes and copies); those no live worker holds end here, as cancelled,
        and their working copies on this machine are removed: a dead worker never sees a cancel."""
        task = self.store.get_task(task_id)
        if task.state in FINAL:
            raise refused(task, "cancel", commit=self._accepted_commit(task))
        cancelled = self.store.set_state(task_id, TaskState.CANCELLED, event=("cancelled", {}))
        from errand.tasks.engines.reconcile import end_abandoned_runs

        end_abandoned_runs(self.store, task_id)
        return cancelled

    def retry(self, task_id: str) -> Task:
        """Run a failed or cancelled task again: a new round from where the last one started
        (the base, or the work of the last round that finished), every earlier round kept."""
        task = self._settled(task_id, "retry", _RETRYABLE)
        if task.model_endpoint is not None:
            check_serves(task.model_endpoint, running_worker())
        return self.store.set_state(task_id, TaskState.QUEUED, expected=task.state,
                                    event=("retried", {"after": task.state.value,
                                                       "round": self.store.next_round(task_id)}))

    # ------------------------------------------------------------ review

    def followup(self, task_id: str, text: str = "", comments: Sequence[LineComment] = (), *,
                 attempt: int | None = None) -> Review | Task:
        """Ask for more work: a new round of the task on its branch, with ``text`` and each of
        ``comments`` (lines of the task's diff, see :mod:`errand.tasks.comments`) anchored in its
        instruction (the review returned). Of an accepted task, whose work has landed, a new task
        that starts from its commit and names it as its parent (that task returned). With comments
        ``text`` may be empty; a comment on a file or lines the diff does not have refuses the
        whole follow-up, and nothing changes.

        The comments are on the diff of run ``attempt`` (the best-ranked of the last round when
        omitted): checked against its lines, quoted from it, and the instruction names it."""
        check_count(comments)
        note = text.strip() if comments and isinstance(text, str) and not text.strip() else _text(
            text, "a follow-up instruction")
        task = self.store.get_task(task_id)
        if task.state is not TaskState.ACCEPTED:
            self._settled(task_id, "followup", _FOLLOWABLE)
        anchored, on, continued = self._anchored(task, comments, attempt) if comments else ([], None, None)
        from errand.tasks.round.prompt import commented_instruction

        instruction = _text(commented_instruction(note, anchored, attempt=on, continued=continued),
                            "a follow-up instruction")
        if task.state is TaskState.ACCEPTED:
            return self._follow_accepted(task, instruction, note, anchored)
        review = self.store.add_review(task_id, Verdict.FOLLOWUP, instruction)
        self.store.append_event(task_id, None, "followup", followup_data(instruction, note, anchored, on))
        self._observe( self.store.get_task(task_id), "followup", note or None)
        return review

    def _anchored(self, task: Task, comments: Sequence[LineComment],
                  attempt: int | None) -> tuple[list[LineComment], int | None, int | None]:
        """``comments`` checked against, and quoting, the diff they are about: the accepted run's
        of an accepted task, else run ``attempt``'s (the best-ranked's if omitted); and which
        attempt that is, and which one the next round continues, when there is a choice to name."""
        accepted = self.store.last_event(task.id, ["accepted"]) if task.state is TaskState.ACCEPTED else None
        run_id = Committed.of(accepted).run_id if accepted is not None else ""
        runs = [r for r in self.store.runs(task.id) if r.id == run_id and r.outcome is not None]
        best = runs[0] if runs else self.chosen_run(task.id)
        run = best if attempt is None else self.chosen_run(task.id, attempt)
        if runs and run.id != best.id:
            raise ConfigError(f"task {task.id} was accepted as attempt {best.attempt}: comments on it are on that "
                              f"attempt's diff, not attempt {attempt}'s", code="bad_attempt")
        if run.round != best.round:
            raise ConfigError(f"attempt {run.attempt} is of round {run.round}, not of the last round ({best.round}): "
                              "comment on an attempt of the last round", code="bad_attempt")
        assert run.outcome is not None
        if not run.outcome.patch:
            raise ConfigError(f"attempt {run.attempt} of task {task.id} changed no file: there are no lines to "
                              "comment on; send the follow-up as text", code="unknown_path")
        anchored = anchor(run.outcome.patch, comments, _base_reader(task))
        several = attempt is not None or len(self.store.runs(task.id, round=run.round)) > 1
        return anchored, run.attempt if several else None, best.attempt if several and not runs else None

    def _follow_accepted(self, task: Task, text: str, note: str = "",
                         comments: Sequence[LineComment] = ()) -> Task:
        commit = self._accepted_commit(task) or task.base_commit or task.base_ref
        if is_url(task.repo):
            raise WrongState(f"task {task.id} came from {task.repo}; its accepted {landed(commit, task.branch)} is "
                             f"in the clone you accepted it into: start the follow-up there with `errand run "
                             f"\"...\" --repo CLONE --base {task.branch}`", task_id=task.id, state=task.state.value)
        base = task.branch if task.branch and _resolves(task.repo, task.branch) else commit
        instruction = (f"{text}\n\nThis follows up task {task.id} (\"{task.title}\"), whose work was accepted as "
                       f"{landed(commit, task.branch)}; your working copy starts from it.")
        about = note or f"{len(comments)} line comment{'' if len(comments) == 1 else 's'}"
        new = self.submit(instruction, repo=task.repo, base=base, model=task.model, attempts=task.attempts,
                          title=f"Follow-up to {task.id}: {about}", parent_id=task.id, agent=task.agent)
        self.store.append_event(task.id, None, "followed_up", {"task_id": new.id, **followup_data(text, note,
                                                                                                    comments)})
        self._observe( task, "followup", note or None)
        return new

    def reject(self, task_id: str, reason: str) -> Review:
        reason = _text(reason, "a reason")
        self._settled(task_id, "reject", _REVIEWABLE)
        review = self.store.add_review(task_id, Verdict.REJECTED, reason)
        self.store.append_event(task_id, None, "rejected", {"reason": review.reason})
        self._observe( self.store.get_task(task_id), "rejected", review.reason)
        return review

    def accept(self, task_id: str, *, attempt: int | None = None, into: str | Path | None = None,
               confirm: bool = False) -> Accepted:
        """Commit the chosen run's diff on the task's branch in the repository (``into`` for a
        task made from a URL). The current branch, index and worktree are left untouched. The
        commit credits whoever :meth:`credit` named, and is signed when ``ERRAND_SIGNING_KEY``
        names a key; a commit :meth:`prepare` wrote for the same run is the one the branch gets.

        A diff whose tests fail after it, at low confidence, or that deletes files is refused with
        :class:`NeedsConfirmation` (its reasons named) unless ``confirm``; nothing changes then."""
        task = self._settled(task_id, "accept", _REVIEWABLE)
        run = self.chosen_run(task_id, attempt)
        risks = [] if confirm else accept_risks(self.evidence(run), run.outcome.patch if run.outcome else "")
        if risks:
            raise NeedsConfirmation(f"attempt {run.attempt} of task {task_id} needs a confirm before it is accepted: "
                                    + "; ".join(risks), task_id=task_id, reasons=risks)
        repo = Path(into) if into is not None else _local_repo(task)
        assert task.branch is not None
        prepared = self._prepared(task, run, repo)
        commit = prepared or self._write_commit(task, run, repo)
        branch_at(repo, task.branch, commit)
        self.store.add_review(task_id, Verdict.ACCEPTED, None)
        self.store.append_event(task_id, None, "accepted", Committed(run.id, task.branch, commit).to_data())
        self._observe( task, "accepted", None)
        return Accepted(task_id, run.id, task.branch, commit)

    def prepare(self, task_id: str) -> Accepted:
        """The commit :meth:`accept` would make of the chosen run, written now without a branch and
        without accepting (a draft pull request shows it); a later accept of that run lands this
        very commit, so what was pushed and what was accepted are one."""
        task = self._settled(task_id, "prepare", _REVIEWABLE)
        run = self.chosen_run(task_id)
        repo = _local_repo(task)
        assert task.branch is not None
        commit = self._prepared(task, run, repo) or self._write_commit(task, run, repo)
        # A ref keeps the commit from git's garbage collection while the draft waits for its review.
        run_git(["update-ref", f"refs/errand/prepared/{task.id}", commit], repo)
        self.store.append_event(task_id, None, "prepared", Committed(run.id, task.branch, commit).to_data())
        return Accepted(task_id, run.id, task.branch, commit)

    def credit(self, task_id: str, name: str, email: str) -> None:
        """Name a person the accepted commit credits (``Co-authored-by: name <email>``): who asked."""
        trailer = _co_author(name, email)
        self.store.get_task(task_id)
        self.store.append_event(task_id, None, "credited", Credited(*trailer).to_data())

    def _write_commit(self, task: Task, run: Run, repo: Path) -> str:
        result = run.outcome
        assert result is not None  # chosen_run picks ranked runs only
        credited = [Credited.of(e) for e in self.store.events(task.id, kinds=["credited"])]
        co_authors = [_co_author(credit.name, credit.email) for credit in credited]
        return write_commit(repo, task.base_commit or task.base_ref, result.patch,
                            _commit_message(task, result.summary), author=_author(repo),
                            trailers=[("Co-authored-by", f"{name} <{email}>") for name, email in co_authors],
                            signing=Signing.from_environment())

    def _prepared(self, task: Task, run: Run, repo: Path) -> str | None:
        event = self.store.last_event(task.id, ["prepared"])
        prepared = Committed.of(event) if event is not None else None
        if prepared is None or prepared.run_id != run.id:
            return None
        commit = prepared.commit
        found = run_git(["rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"], repo, check=False).strip()
        return found or None

    def _settled(self, task_id: str, action: str, allowed: frozenset[TaskState]) -> Task:
        """The task, if ``action`` fits its state and no run of it is still stopping; else why not."""
        task = self.store.get_task(task_id)
        if task.state not in allowed:
            raise refused(task, action, commit=self._accepted_commit(task))
        if action in ("retry", "followup") and any(r.state is RunState.RUNNING for r in self.store.runs(task_id)):
            # A cancelled round ends its sandboxes before it marks its runs; a new one must not overlap it.
            raise WrongState(f"task {task_id} {task.state.value}, and its last round is still stopping; try again "
                             "in a moment", task_id=task_id, state=task.state.value)
        return task

    def _accepted_commit(self, task: Task) -> str | None:
        if task.state is not TaskState.ACCEPTED:
            return None
        event = self.store.last_event(task.id, ["accepted"])
        return (Committed.of(event).commit or None) if event is not None else None

    def record(self, task_id: str, kind: str, data: dict[str, Any]) -> int:
        """Write an event about ``task_id`` (not one of its runs) in its log: what another layer
        (the forge) did for the task, for the person who reads the log. Its id."""
        self.store.get_task(task_id)  # an unknown id is TaskNotFound
        return self.store.append_event(task_id, None, kind, data)

    # ------------------------------------------------------------ reading

    def last_event(self, task_id: str, kinds: Sequence[str]) -> Event | None:
        """The newest of ``task_id``'s events of ``kinds``."""
        return self.store.last_event(task_id, kinds)

    def accepted_commit(self, task_id: str) -> str | None:
        """The commit an accepted task landed on its branch; None for a task not accepted."""
        return self._accepted_commit(self.store.get_task(task_id))

    def open_question(self, task_id: str) -> tuple[int, str] | None:
        """The question the task's agent asked last, as ``(its event's id, its text)``."""
        event = self.store.last_event(task_id, ["question"])
        return (event.id, text_of(event)) if event is not None else None

    def questions_answered(self, task_id: str) -> list[tuple[str, str]]:
        """Each question the agent asked and the answer it was given, in order."""
        pairs, question = [], None
        for event in self.store.events(task_id, kinds=["question", "answer_delivered"]):
            if event.kind == "question":
                question = text_of(event)
            elif question is not None:
                pairs.append((question, text_of(event)))
                question = None
        return pairs

    def chosen_run(self, task_id: str, attempt: int | None = None) -> Run:
        """The run a review is about: the best-ranked of the last finished round, or the
        run whose ``attempt`` number is given."""
        self.store.get_task(task_id)  # an unknown id is TaskNotFound, not "no result yet"
        runs = [r for r in self.store.runs(task_id) if r.outcome is not None]
        if attempt is not None:
            for run in runs:
                if run.attempt == attempt:
                    return run
            raise TaskError(f"task {task_id} has no finished run number {attempt} "
                            f"(finished: {', '.join(str(r.attempt) for r in runs) or 'none'})",
                            task_id=task_id, code="run_not_found")
        if not runs:
            raise TaskError(f"task {task_id} has no finished run yet", task_id=task_id, code="no_result")
        last_round = max(r.round for r in runs)
        return min((r for r in runs if r.round == last_round), key=_rank)

    def round_runs(self, task_id: str) -> list[Run]:
        """The runs of the last round that finished, best first."""
        best = self.chosen_run(task_id)
        return sorted((r for r in self.store.runs(task_id, round=best.round) if r.outcome is not None), key=_rank)

    def progress(self, task_id: str) -> dict[str, Any]:
        """Elapsed time, steps, tokens and cost, and each attempt of the latest round against
        its budgets (:meth:`errand.tasks.progress.Progress.to_json`)."""
        return self.figures(self.store.get_task(task_id)).to_json()

    def figures(self, task: Task, runs: list[Run] | None = None) -> Progress:
        """:meth:`progress` as a value, of a task (and its runs) the caller has read already."""
        return progress(self.store, task, runs)


def issue_instruction(path: Path) -> tuple[str, str]:
    """``(title, instruction)`` from an issue written in Markdown: the first heading (or
    line) is the title, the whole text the instruction."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read issue file {path}: {error}", code="bad_issue") from None
    text = _instruction(text)
    first = next(line for line in text.splitlines() if line.strip())
    return re.sub(r"^#+\s*", "", first).strip(), text


# ------------------------------------------------------------------ checks


def _instruction(instruction: object) -> str:
    if not isinstance(instruction, str) or not instruction.strip():
        raise ConfigError("an instruction is needed: say what the agent should do", code="empty_instruction")
    if len(instruction.encode()) > MAX_INSTRUCTION_BYTES:
        raise ConfigError(f"the instruction is longer than {MAX_INSTRUCTION_BYTES} bytes", code="too_long")
    return instruction.strip()




def _base_reader(task: Task) -> Callable[[str], str | None]:
    """A path's text at the task's base commit, from the host's repository (``None`` for a task made
    from a URL, or a path the commit does not have)."""
    def read(path: str) -> str | None:
        if is_url(task.repo) or not task.base_commit:
            return None
        try:
            return run_git(["cat-file", "blob", f"{task.base_commit}:{path}"], Path(task.repo))
        except RepoError:
            return None
    return read


def _text(text: object, what: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{what} needs some text", code="empty_text")
    if len(text.encode()) > MAX_INSTRUCTION_BYTES:
        raise ConfigError(f"{what} is longer than {MAX_INSTRUCTION_BYTES} bytes", code="too_long")
    return text.strip()


def _title(title: str | None, instruction: str) -> str:
    line = (title or instruction).strip().splitlines()[0].strip()
    return line if len(line) <= MAX_TITLE else line[:MAX_TITLE - 1].rstrip() + "…"


def resolve_model(model: str | None) -> tuple[str, ModelEndpoint]:
    """The spec a task is given (``model``, else ``$ERRAND_MODEL``, else the settings file's
    default) and the endpoint it names in this process's environment, checked by building
    its client: a malformed name, a missing script or a missing key fails here, not later."""
    catalog = Catalog.load()
    spec = (model or os.environ.get("ERRAND_MODEL") or catalog.default or "").strip()
    if not spec:
        raise ConfigError("no model is configured: pass --model (a [models.NAME] from errand's config.toml, or "
                          "provider:model such as openai:gpt-4.1) or set ERRAND_MODEL", code="no_model")
    endpoint = catalog.resolve(spec, os.environ)
    if endpoint.provider == "scripted" and endpoint.name is None:
        spec = endpoint.spec  # its path made absolute: the worker may run elsewhere
    try:
        open_model(endpoint, os.environ)
    except ConfigError as error:
        raise ConfigError(f"unknown model {spec!r}: {error.message}", code="unknown_model") from None
    except ModelError as error:  # say, no API key for the provider
        if error.code == "provider_cli_only":  # its key is here; only an agent CLI can use it (see submit)
            return spec, endpoint
        raise ConfigError(f"model {spec!r} cannot be used: {error.message}", code="model_unavailable") from None
    return spec, endpoint


def _default_agent() -> str:
    """The agent of errand's settings file (``agent = "claude-code"``), else errand's own."""
    from errand.agent.seam import DEFAULT_KIND, agent_kind

    written = Catalog.load().agent
    return agent_kind(written, where=f"{_settings.config_path()}: agent") if written else DEFAULT_KIND


def _check_config(repo: Path, commit: str) -> Environment | None:
    """Parse the repository's errand.toml as the base commit has it (None: it has none)."""
    from errand.tasks.round.environment import Environment

    listing = run_git(["ls-tree", "--name-only", commit, "--", CONFIG_FILE], repo).strip()
    if not listing:
        return None
    text = run_git(["show", f"{commit}:{CONFIG_FILE}"], repo)
    with tempfile.TemporaryDirectory(prefix="errand-config-") as tmp:
        (Path(tmp) / CONFIG_FILE).write_text(text, encoding="utf-8", errors="surrogateescape")
        try:
            return Environment.load(Path(tmp))
        except ConfigError as error:
            message = error.message.replace(str(Path(tmp).resolve() / CONFIG_FILE), f"{CONFIG_FILE} at {commit[:12]}")
            raise ConfigError(message, code=error.code) from None


def _resolves(repo: str, ref: str) -> bool:
    try:
        resolve_base(repo, ref)
    except ConfigError:
        return False
    return True


def _local_repo(task: Task) -> Path:
    if is_url(task.repo):
        raise ConfigError(f"task {task.id} came from {task.repo}; accept it into a local clone with --into PATH",
                          code="needs_local_repo")
    return Path(task.repo)


def _rank(run: Run) -> int:
    outcome = run.outcome
    assert outcome is not None
    return outcome.rank


def _commit_message(task: Task, summary: str | None) -> str:
    """The agent's summary (its first line as the subject), then the task it did."""
    summary = (summary or "").strip()
    if not summary:
        return f"{task.title}\n\nerrand-task: {task.id}\n"
    first, _, rest = summary.partition("\n")
    subject = first if len(first) <= MAX_TITLE else first[:MAX_TITLE - 1].rstrip() + "…"
    body = "\n\n".join(part for part in (summary if subject != first or rest else "", f"Task: {task.title}") if part)
    return f"{subject}\n\n{body}\n\nerrand-task: {task.id}\n"


def _co_author(name: str, email: str) -> tuple[str, str]:
    name, email = " ".join(name.split()), email.strip()
    if not name or any(c in name for c in "<>") or not re.fullmatch(r"[^<>\s@]+@[^<>\s@]+", email):
        raise ConfigError(f"a co-author is 'Name <email>': got {name!r} <{email!r}>", code="invalid_input")
    return name, email


def _author(repo: Path) -> str | None:
    """The repository's own identity if it has one, else errand's (so an unconfigured
    machine can still accept)."""
    email = run_git(["config", "user.email"], repo, check=False).strip()
    return None if email else "errand <errand@localhost>"
