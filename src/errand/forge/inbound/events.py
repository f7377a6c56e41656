"""A webhook delivery said once, in errand's own words: who wrote what, where, and under which ids.

:mod:`errand.forge.inbound.receivers` turns each forge's delivery into GitHub's event names and
payload shapes; :func:`normalise` reads those into a :class:`ForgeEvent`, the one input
:func:`errand.forge.inbound.decide.decide` looks at. Nothing here talks to the forge or the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ForgeEvent", "normalise"]

# ping | labeled | comment (on an issue or a pull request) | review (its body) | line_comment | other
KINDS = frozenset({"ping", "labeled", "comment", "review", "line_comment", "other"})


@dataclass(frozen=True)
class ForgeEvent:
    """What one delivery says. ``review_id`` is the review a review's body or a line comment
    belongs to: one review is one instruction, however many deliveries carry its parts."""

    delivery: str
    kind: str
    repo: str = ""
    number: int | None = None  # the issue's or pull request's
    pull: bool = False  # ``number`` is a pull request's (GitLab numbers them apart from issues)
    author: str | None = None
    author_id: int | None = None
    body: str = ""
    comment_id: int | None = None  # the comment to react to; None for a review's body or a label
    review_id: int | None = None
    label: str | None = None
    name: str = ""  # the forge's own name for it (``issues.closed``), for what errand says it ignored
    # False when the forge said only that the issue's labels changed and it has ``label`` (Gitea):
    # not necessarily added now.
    label_added: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"no event kind {self.kind!r}")

    @property
    def on_line(self) -> bool:
        return self.kind == "line_comment"


def normalise(event: str, delivery: str, payload: dict[str, Any]) -> ForgeEvent:
    """``event`` and ``payload`` in GitHub's words, read into a :class:`ForgeEvent`; a shape the
    forge does not send raises ``KeyError``/``TypeError``/``ValueError`` (the server answers 400)."""
    action = payload.get("action")
    name = f"{event}.{action}"
    repo = str((payload.get("repository") or {}).get("full_name") or "")
    if event == "ping":
        return ForgeEvent(delivery, "ping", name=name)
    if event == "issues" and action in ("labeled", "label_updated"):
        sender = payload.get("sender")
        return ForgeEvent(delivery, "labeled", repo, int(payload["issue"]["number"]), author=_login(sender),
                          author_id=_user_id(sender), label=str((payload.get("label") or {}).get("name") or ""),
                          name=name, label_added=action == "labeled")
    if event == "issue_comment" and action == "created":
        issue, comment = payload["issue"], payload["comment"]
        return _written(delivery, "comment", repo, issue, comment, name, comment_id=comment.get("id"),
                        pull=issue.get("pull_request") is not None)
    if event == "pull_request_review_comment" and action == "created":
        comment = payload["comment"]
        return _written(delivery, "line_comment", repo, payload["pull_request"], comment, name, pull=True,
                        comment_id=comment.get("id"), review_id=comment.get("pull_request_review_id"))
    if event == "pull_request_review" and action == "submitted":
        review = payload["review"]
        return _written(delivery, "review", repo, payload["pull_request"], review, name, pull=True,
                        review_id=review.get("id"))
    return ForgeEvent(delivery, "other", repo, name=name)


def _written(delivery: str, kind: str, repo: str, where: dict[str, Any], said: dict[str, Any], name: str, *,
             pull: bool, comment_id: object = None, review_id: object = None) -> ForgeEvent:
    user = said.get("user")
    return ForgeEvent(delivery, kind, repo, int(where["number"]), pull=pull, author=_login(user),
                      author_id=_user_id(user), body=str(said.get("body") or "").strip(),
                      comment_id=_id(comment_id), review_id=_id(review_id), name=name)


def _id(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _user_id(user: object) -> int | None:
    return _id(user.get("id")) if isinstance(user, dict) else None


def _login(user: object) -> str | None:
    return str(user.get("login")) if isinstance(user, dict) and user.get("login") else None
