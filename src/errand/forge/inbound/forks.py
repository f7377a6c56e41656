"""``@errand`` on a pull request errand did not open: a person's branch, or a fork's.

The round starts from the pull request's head as the base repository mirrors it
(``refs/pull/N/head``), fetched read-only: the token is sent to the base repository
to read, never to a fork's URL, and nothing of the head runs on the host — the round
runs in a sandbox that holds no credential, and git on the host runs with hooks off.
(As for every round, the head's own ``errand.toml`` shapes that sandbox: it is the
commit the round works on. The sandbox has no token to lose.)

Where the round's commit goes:

* the pull request's own branch, as a fast-forward, when that branch is in the
  repository or in a fork whose author lets maintainers edit it
  (``maintainer_can_modify``): the forge accepts a push there from the base's writers;
* otherwise a branch ``errand/<id>-<slug>`` of the base repository and a new pull
  request that names the fork's, and errand says so on the fork's pull request. A
  later ask on that fork's pull request goes onto the same errand pull request, never
  a new one.
"""

from __future__ import annotations

from errand.forge.errors import ForgeError
from errand.forge.inbound.intake import Ask, follow_pull, followup_instruction, head_reader, short
from errand.forge.links import Link, LinkStore, Round
from errand.forge.outbound.attribution import credit_asker
from errand.forge.outbound.push import fetch_ref
from errand.forge.protocol import Forge
from errand.forge.records import PullRequest, ReviewComment
from errand.forge.settings import RepoSettings
from errand.forge.text import visible
from errand.forge.timeline import FollowupAsked, note
from errand.tasks.records import Task
from errand.tasks.service import TaskService

__all__ = ["follow_foreign_pull", "pushable"]


def pushable(pull: PullRequest) -> bool:
    """Whether errand may push a round's commit to ``pull``'s own branch."""
    return pull.head_repo is None or pull.maintainer_can_modify


def follow_foreign_pull(service: TaskService, links: LinkStore, forge: Forge, token: str, where: RepoSettings,
                        repo: str, pull: PullRequest, ask: Ask, line_comments: list[ReviewComment]) -> Task:
    """A round on ``pull`` of ``repo``, which errand did not open (see the module's docstring)."""
    if not pushable(pull):
        earlier = _errand_pull_for(links, repo, pull.number)
        if earlier is not None:
            return follow_pull(service, links, forge, token, earlier, ask, line_comments)
    head = fetch_ref(where.path, forge.repository(repo).clone_url, f"refs/pull/{pull.number}/head", token)
    if head is None:
        raise ForgeError(f"{repo}#{pull.number} has no head to start from", code="forge_not_found")
    where_from = f"{pull.head_repo}:{pull.head}" if pull.head_repo else pull.head
    task = service.submit(followup_instruction(repo, pull.number, where_from, ask, line_comments,
                                               head_reader(where.path, head)),
                          repo=where.path, base=head, model=where.model, attempts=1,
                          title=f"Round on #{pull.number}: {short(visible(ask.text or 'review comments'))}")
    mine = pushable(pull)
    links.add(Link(task.id, forge.name, forge.base_url, repo, requested_by=ask.author, comment_id=ask.comment_id,
                   pull=pull.number if mine else None, pull_url=pull.url if mine else None,
                   pull_branch=pull.head if mine else None))
    credit_asker(service, forge, task.id, ask.author, ask.author_id)
    threads = tuple(c.id for c in line_comments if c.in_reply_to is None and visible(c.body)) if mine else ()
    asked = links.add_round(Round(task.id, pull.number, pull.head, head, ask.author, threads, fork=pull.head_repo,
                                  push_repo=pull.head_repo if mine else None, fork_pull=None if mine else pull.number))
    note(service, task.id, FollowupAsked(asked))
    return task


def _errand_pull_for(links: LinkStore, repo: str, number: int) -> Link | None:
    """The pull request errand opened in ``repo`` for fork pull request ``number``, if it did."""
    link = links.errand_pull_for(repo, number)
    if link is None or link.pull is None:
        return None
    return links.for_pull(repo, link.pull) or link
