"""Taking an accepted task to the forge: push its commit, open (or find) its pull request.

Each step is safe to repeat, so a retry after any failure finishes the job and
never doubles it: the push is skipped when the link records that commit pushed;
the pull request is looked up by its branch before one is opened, and a 422
"already exists" (another process won the race) is answered by looking again.
The branch is pushed before a pull request is asked for, so there is never a
pull request without its branch. A follow-up round of a pull request (a review
comment asked for it) is accepted here, since the pull request is its review,
and pushed to that pull request's branch as a fast-forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from errand.forge.errors import ForgeError
from errand.forge.inbound.cifix import fix_owed, fix_red_ci
from errand.forge.links import Link, LinkStore, Round
from errand.forge.outbound.body import pull_body, pull_title
from errand.forge.outbound.push import push
from errand.forge.protocol import Forge
from errand.forge.questions import post_question
from errand.forge.records import CheckState, PullRequest
from errand.forge.refs import IssueRef
from errand.forge.timeline import ChecksRead, ForgeFailed, PullOpened, Pushed, last_checks, note
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Task
from errand.tasks.service import TaskService

__all__ = ["Published", "Publisher", "catch_up"]


@dataclass(frozen=True)
class Published:
    task_id: str
    pull: int
    url: str
    branch: str
    commit: str
    opened: bool  # False: the pull request was there already (a retry, or a follow-up round)


class Publisher:
    """``pr`` is the policy: ``on-accept`` opens the pull request once a person accepted the task
    (in errand or with ``@errand accept`` on the issue); ``draft-when-ready`` opens a draft as soon
    as the task is ready, holding the very commit an accept will land, and ``@errand accept`` on it
    accepts the task. Either way errand merges nothing."""

    def __init__(self, service: TaskService, links: LinkStore, forge: Forge, token: str, *, draft: bool = True,
                 public_url: str | None = None, ci_fix_attempts: int = 0, pr: str = "on-accept") -> None:
        self.service = service
        self.links = links
        self.forge = forge
        self._token = token
        self.draft = draft
        self.public_url = public_url.rstrip("/") if public_url else None
        self.ci_fix_attempts = ci_fix_attempts
        self.pr = pr

    @property
    def token(self) -> str:
        return self._token

    def due(self, link: Link) -> bool:
        """Whether ``link``'s task has work for the forge that is not there yet."""
        state = self.service.get_task(link.task_id).state
        if link.pull is None:
            return state is TaskState.ACCEPTED or (state is TaskState.READY_FOR_REVIEW and (
                self.pr == "draft-when-ready" or self.links.round(link.task_id) is not None))
        return link.pushed is None and state in (TaskState.READY_FOR_REVIEW, TaskState.ACCEPTED)

    def publish(self, task_id: str) -> Published:
        link = self.links.get(task_id)
        if link is None:
            raise ForgeError(f"task {task_id} did not come from a forge; push its branch yourself",
                             code="not_linked")
        task = self.service.get_task(task_id)
        round_ = self.links.round(task_id)
        if task.state is TaskState.READY_FOR_REVIEW and round_ is not None:
            # A round the forge asked for (a review comment, a fork's pull request): the pull request is its review.
            self.service.accept(task_id, confirm=True)
            task = self.service.get_task(task_id)
        commit, draft = self._commit(task, link)
        branch = link.pull_branch or task.branch or ""
        if link.pushed != commit:
            push(Path(task.repo), self._push_url(link, round_), commit, branch, self._token)
            link = self.links.update(task_id, pushed=commit, pull_branch=branch)
            note(self.service, task_id, Pushed(branch, commit))
            if link.pull is not None:
                self._say_pushed(task, link, commit)
        if link.pull is not None:
            return Published(task_id, link.pull, link.pull_url or "", branch, commit, opened=False)
        pull, opened = self._pull(task, link, branch, draft=draft, follows=round_.fork_pull if round_ else None)
        self.links.update(task_id, pull=pull.number, pull_url=pull.url)
        if opened:
            note(self.service, task_id, PullOpened(pull.number, pull.url, branch))
            self._say_opened(task, link, pull, round_)
        return Published(task_id, pull.number, pull.url, branch, commit, opened=opened)

    def _commit(self, task: Task, link: Link) -> tuple[str, bool]:
        """The commit to put on the forge, and whether its pull request opens as a draft."""
        if task.state is TaskState.READY_FOR_REVIEW and link.pull is None and self.pr == "draft-when-ready":
            return self.service.prepare(task.id).commit, True
        if task.state is not TaskState.ACCEPTED:
            raise ForgeError(f"task {task.id} is {task.state.value}: accept it first (`errand accept {task.id}`)",
                             code="not_accepted")
        return self._accepted_commit(task), self.draft

    def _push_url(self, link: Link, round_: Round | None) -> str:
        """Where the round's commit goes: the repository, or the fork whose pull request lets the
        base's writers push to its branch. The token goes to the forge's own host and no other."""
        base = self.forge.repository(link.repo).clone_url
        fork = round_.push_repo or "" if round_ else ""
        if not fork or fork == link.repo:
            return base
        url = self.forge.repository(fork).clone_url
        if urlsplit(url).netloc != urlsplit(base).netloc or urlsplit(url).scheme != urlsplit(base).scheme:
            raise ForgeError(f"the fork {fork} is served from {urlsplit(url).netloc}, not the forge's own "
                             f"{urlsplit(base).netloc}: errand sends its token nowhere else", code="forge_refused")
        return url

    def _say_opened(self, task: Task, link: Link, pull: PullRequest, round_: Round | None) -> None:
        if link.issue is not None:
            self.forge.comment(IssueRef.of(link.repo, link.issue),
                               f"errand opened {pull.url} for this issue (task `{task.id}`).")
        if round_ and round_.fork_pull:
            who = f"@{link.requested_by}: " if link.requested_by else ""
            self.forge.comment(IssueRef.of(link.repo, round_.fork_pull),
                               f"{who}errand may not push to `{round_.fork}:{round_.branch}` (its author "
                               f"has not allowed edits by maintainers), so its commit is on `{pull.head}` in "
                               f"{link.repo} instead: {pull.url} (task `{task.id}`).")

    def _pull(self, task: Task, link: Link, branch: str, *, draft: bool,
              follows: int | None) -> tuple[PullRequest, bool]:
        found = self.forge.find_pull(link.repo, branch)
        if found is not None:
            return found, False
        run = self.service.chosen_run(task.id)
        evidence = self.service.evidence(run)
        base = task.base_ref if task.base_ref not in ("HEAD", task.base_commit) else \
            self.forge.repository(link.repo).default_branch
        body = pull_body(task, evidence, issue=link.issue, qa=self.service.questions_answered(task.id),
                         review_url=f"{self.public_url}/tasks/{task.id}" if self.public_url else None,
                         requested_by=link.requested_by, follows=follows)
        title = pull_title(task, run.outcome.summary if run.outcome else None)
        try:
            return self.forge.open_pull(link.repo, branch=branch, base=base, title=title, body=body, draft=draft), True
        except ForgeError as error:
            again = self.forge.find_pull(link.repo, branch) if error.code == "forge_refused" else None
            if again is None:
                raise
            return again, False

    def checks(self, task_id: str) -> list[CheckState]:
        """The CI results on the commit last pushed for the task, recorded as a ``forge_checks``
        event when they changed: the evidence the forge's CI adds to errand's own."""
        link = self.links.get(task_id)
        if link is None or link.pushed is None:
            return []
        found = self.forge.checks(link.repo, link.pushed)
        self.record_checks(link, found)
        return found

    def record_checks(self, link: Link, found: list[CheckState]) -> None:
        read = ChecksRead.of(link.pushed, found)
        if last_checks(self.service, link.task_id) != read:
            note(self.service, link.task_id, read)

    def _say_pushed(self, task: Task, link: Link, commit: str) -> None:
        assert link.pull is not None
        outcome = self.service.chosen_run(task.id).outcome
        summary = " ".join(str(outcome.summary if outcome else "").split())
        said = f"errand pushed {commit[:12]} to `{link.pull_branch}` (task `{task.id}`)" + (
            f": {summary}" if summary else ".")
        self.forge.comment(IssueRef.of(link.repo, link.pull, pull=True), said)
        # Every line comment the round was given hears back on its own thread, not only the one that asked.
        asked = self.links.round(task.id)
        for thread in asked.threads if asked is not None else ():
            self.forge.reply_review(link.repo, link.pull, thread, said)

    def _accepted_commit(self, task: Task) -> str:
        commit = self.service.accepted_commit(task.id)
        if not commit:
            raise ForgeError(f"task {task.id} has no accepted commit", code="not_accepted")
        return str(commit)


def catch_up(publisher: Publisher) -> list[Published]:
    """Post the questions of waiting tasks and publish every linked task whose work the forge does
    not have yet; a failure is an event on its task (``forge_error``) and does not stop the rest."""
    done: list[Published] = []
    mine = publisher.forge.name  # one publisher per forge: another forge's links are its own publisher's
    for link in publisher.links.pending():
        if link.forge != mine:
            continue
        try:
            post_question(publisher.service, publisher.links, publisher.forge, link)
            if publisher.due(link):
                done.append(publisher.publish(link.task_id))
        except ForgeError as error:
            note(publisher.service, link.task_id, ForgeFailed(error.code, error.message))
    for link in publisher.links.pushed_pulls():
        if link.forge == mine and link.pushed is not None and (_unsettled(publisher, link)
                                                               or fix_owed(publisher, link)):
            try:
                found = publisher.forge.checks(link.repo, link.pushed)
                fix_red_ci(publisher, link, found)  # before the record: a reader who sees it sees the decision
            except ForgeError:
                continue  # read again on the next pass
            publisher.record_checks(link, found)
    return done


_SETTLED = frozenset({"success", "failure", "neutral", "skipped", "cancelled", "error", "timed_out",
                      "action_required", "stale"})


def _unsettled(publisher: Publisher, link: Link) -> bool:
    """Whether the CI of the link's pushed commit may still change (not read yet, or something pending)."""
    last = last_checks(publisher.service, link.task_id)
    if last is None or last.commit != link.pushed or not last.checks:
        return True
    return any(check.state not in _SETTLED for check in last.checks)
