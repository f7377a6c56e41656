"""Naming an issue on a forge: ``owner/name#42`` or the issue's web address.

GitLab nests groups (``group/sub/project#42``, ``…/group/sub/project/-/issues/42``) and
numbers merge requests apart from issues (``!7`` is not ``#7``), so a reference says
whether it names a merge request: ``pull``. GitHub and Gitea number both in one
series, and their pull requests take issue comments, so there ``pull`` changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from errand.forge.errors import ForgeError

__all__ = ["IssueRef", "looks_like_issue_ref"]

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,99})"
_OWNER = rf"{_NAME}(?:/{_NAME}){{0,19}}"  # GitLab's groups nest (at most 20 deep)
_SHORT = re.compile(rf"^({_OWNER})/({_NAME})(#|!)(\d{{1,9}})$")
_PATH = re.compile(rf"^/({_OWNER})/({_NAME})/(?:-/)?(issues|pull|pulls|merge_requests)/(\d{{1,9}})/?$")


@dataclass(frozen=True)
class IssueRef:
    """One issue (or pull request: on GitHub they share numbers) of one repository."""

    owner: str
    name: str
    number: int
    pull: bool = False  # a GitLab merge request's number (``!7``)

    @property
    def repo(self) -> str:
        return f"{self.owner}/{self.name}"

    def __str__(self) -> str:
        return f"{self.repo}#{self.number}"

    @classmethod
    def of(cls, repo: str, number: int, *, pull: bool = False) -> IssueRef:
        """Issue ``number`` of ``repo`` (``owner/name``, or ``group/sub/project``)."""
        owner, _, name = repo.rpartition("/")
        return cls(owner, name, int(number), pull)

    @classmethod
    def parse(cls, text: str) -> IssueRef:
        """``owner/name#42``, or ``https://host/owner/name/issues/42`` (or ``/pull/42``; Gitea's
        ``/pulls/42``; GitLab's ``group/project!7``, ``/group/project/-/issues/42`` and
        ``/-/merge_requests/7``)."""
        return cls.parse_path(text, text.strip())

    @classmethod
    def parse_path(cls, text: str, given: str) -> IssueRef:
        """``given``, the reference or a URL (or a URL's path under the forge's web root, ``/owner/…``)."""
        short = _SHORT.match(given)
        if short is None and given.startswith(("https://", "http://", "/")):
            short = _PATH.match(urlsplit(given).path if "://" in given else given)
        if short is None or ".." in short.group(0):
            raise ForgeError(f"{text!r} does not name an issue: write owner/name#42 or the issue's URL",
                             code="bad_issue_ref")
        owner, name, kind, number = short.groups()
        return cls(owner, name.removesuffix(".git"), int(number), kind in ("!", "merge_requests"))


def looks_like_issue_ref(text: str) -> bool:
    """Whether ``--issue`` was given a forge issue rather than a Markdown file."""
    try:
        IssueRef.parse(text)
    except ForgeError:
        return False
    return True
