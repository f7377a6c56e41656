"""What errand reads from a forge, as immutable values (never the forge's raw JSON)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CheckState", "Comment", "Issue", "PullRequest", "Repository", "ReviewComment", "Scopes"]


@dataclass(frozen=True)
class Comment:
    id: int
    author: str
    body: str


@dataclass(frozen=True)
class Issue:
    number: int
    title: str
    body: str
    labels: tuple[str, ...]
    author: str
    url: str
    comments: tuple[Comment, ...] = ()
    is_pull: bool = False
    author_id: int | None = None  # the author's numeric id, for a no-reply address


@dataclass(frozen=True)
class PullRequest:
    number: int
    url: str
    head: str  # the branch
    head_sha: str | None
    state: str
    draft: bool
    # Where the head branch lives: None for the repository itself; a fork's owner/name otherwise.
    head_repo: str | None = None
    maintainer_can_modify: bool = False  # a fork's author lets the base's writers push to its branch
    author: str = ""


@dataclass(frozen=True)
class ReviewComment:
    """A comment on a line of a pull request's diff."""

    id: int
    author: str
    body: str
    path: str
    line: int | None  # the last line commented on (None: the file as a whole)
    in_reply_to: int | None = None
    start_line: int | None = None  # the first line, for a comment on several
    side: str = "new"  # new: lines of the head; old: of the base (a removed line)
    diff_hunk: str = ""  # the diff up to the line, as the forge showed it beside the comment


@dataclass(frozen=True)
class CheckState:
    """One CI result on a commit: a check run or a commit status."""

    name: str
    state: str  # success | failure | pending | neutral | skipped | cancelled | error
    url: str | None = None
    detail: str = ""  # what the check said about itself (a check run's output title and summary)


@dataclass(frozen=True)
class Scopes:
    """What the token may do: its login, OAuth scopes (None: a fine-grained token, which
    sends none), and whether it may push to the repository."""

    login: str
    scopes: tuple[str, ...] | None
    can_push: bool


@dataclass(frozen=True)
class Repository:
    full_name: str
    clone_url: str
    default_branch: str
    can_push: bool
