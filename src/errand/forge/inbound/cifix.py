"""A red CI on errand's pull request: a bounded follow-up round on the same branch.

With ``ci_fix_attempts = N`` in ``forge.toml`` (default 0: never), a failing check on
the commit errand last pushed to a pull request starts a follow-up round there, with
the failing checks' names, links and what they reported; its commit goes to the same
branch (never a new branch per failure). At most N such rounds per pull request.

A newer round of the same pull request holds the fix back only while it is in progress
(queued, running, waiting for an answer, ready or accepted and not pushed yet): its commit will be the one CI
judges. One that pushed supersedes the red commit. One that failed, was cancelled or was
rejected pushed nothing, so the red commit is still the branch's head and gets its fix:
:func:`fix_owed` keeps its checks read until then.
"""

from __future__ import annotations

from typing import Protocol

from errand.forge.inbound.intake import Ask, follow_pull
from errand.forge.links import Link, LinkStore
from errand.forge.protocol import Forge
from errand.forge.records import CheckState
from errand.forge.timeline import CiFixStarted, last_checks, note
from errand.tasks.lifecycle import FINAL, TaskState
from errand.tasks.records import Task
from errand.tasks.service import TaskService

__all__ = ["FAILED", "Rounds", "fix_owed", "fix_red_ci"]

FAILED = frozenset({"failure", "error", "timed_out", "action_required"})


class Rounds(Protocol):
    """What starting a round on a pull request needs: the publisher is one, and this module
    names only the shape, so the publisher may call in here without either importing the other."""

    service: TaskService
    links: LinkStore
    forge: Forge
    ci_fix_attempts: int

    @property
    def token(self) -> str: ...


def fix_red_ci(publisher: Rounds, link: Link, found: list[CheckState]) -> Task | None:
    """Start a CI-fix round for ``link``'s pushed commit if its checks failed and the budget allows."""
    failing = [check for check in found if check.state in FAILED]
    if not failing or not _may_fix(publisher, link) or _held(publisher, link) is not None:
        return None
    text = (f"CI failed on {(link.pushed or '')[:12]}, the commit on the pull request's branch. Make the failing "
            "checks pass without weakening them:\n\n" + "\n\n".join(_check(c) for c in failing))
    task = follow_pull(publisher.service, publisher.links, publisher.forge, publisher.token, link, Ask(text=text), [],
                       ci=True)
    publisher.links.ask_fix(link.task_id, link.pushed or "", task.id)
    note(publisher.service, link.task_id, CiFixStarted(task.id, link.pushed or ""))
    return task


def fix_owed(publisher: Rounds, link: Link) -> bool:
    """Whether a red check read on ``link``'s pushed commit still waits for its fix (a newer round
    in progress held it back): its checks are read, and the fix decided, again on the next pass."""
    last = last_checks(publisher.service, link.task_id)
    if last is None or last.commit != link.pushed or not _may_fix(publisher, link):
        return False
    red = any(check.state in FAILED for check in last.checks)
    return red and _held(publisher, link) != "superseded"


def _may_fix(publisher: Rounds, link: Link) -> bool:
    """A pull request, a budget left, and no fix asked for this commit yet."""
    if link.pull is None or publisher.ci_fix_attempts <= 0 or _asked(publisher, link):
        return False
    used = sum(1 for other in publisher.links.all_for_pull(link.repo, link.pull) if _is_ci_round(publisher, other))
    return used < publisher.ci_fix_attempts


def _held(publisher: Rounds, link: Link) -> str | None:
    """Why a newer round of the pull request holds the fix back: ``superseded`` (it pushed),
    ``in progress`` (it may still push); None when none does."""
    assert link.pull is not None
    rounds = publisher.links.all_for_pull(link.repo, link.pull)
    mine = next((i for i, other in enumerate(rounds) if other.task_id == link.task_id), len(rounds))
    newer = rounds[mine + 1:]
    if any(other.pushed is not None for other in newer):
        return "superseded"
    states = [publisher.service.get_task(other.task_id).state for other in newer]
    # Accepted and not pushed yet is on its way to the branch: the publisher pushes it next.
    return "in progress" if any(state not in FINAL or state is TaskState.ACCEPTED for state in states) else None


def _asked(publisher: Rounds, link: Link) -> bool:
    """Whether a CI-fix round was started for this very commit already."""
    return link.pushed is not None and publisher.links.fix_asked(link.task_id, link.pushed)


def _is_ci_round(publisher: Rounds, link: Link) -> bool:
    asked = publisher.links.round(link.task_id)
    return asked is not None and asked.ci


def _check(check: CheckState) -> str:
    head = f"- {check.name}: {check.state}" + (f" ({check.url})" if check.url else "")
    return head + ("\n" + "\n".join(f"  {line}" for line in check.detail.splitlines()) if check.detail else "")
