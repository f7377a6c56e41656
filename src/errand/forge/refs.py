"""Naming an issue on a forge: ``owner/name#42`` or the issue's web address."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from errand.forge.errors import ForgeError

__all__ = ["IssueRef", "looks_like_issue_ref"]

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,99})"
_SHORT = re.compile(rf"^({_NAME})/({_NAME})#(\d{{1,9}})$")
_PATH = re.compile(rf"^/({_NAME})/({_NAME})/(?:issues|pull)/(\d{{1,9}})/?$")


@dataclass(frozen=True)
class IssueRef:
    """One issue (or pull request: on GitHub they share numbers) of one repository."""

    owner: str
    name: str
    number: int

    @property
    def repo(self) -> str:
        return f"{self.owner}/{self.name}"

    def __str__(self) -> str:
        return f"{self.repo}#{self.number}"

    @classmethod
    def of(cls, repo: str, number: int) -> IssueRef:
        """Issue ``number`` of ``repo`` (``owner/name``)."""
        owner, _, name = repo.partition("/")
        return cls(owner, name, int(number))

    @classmethod
    def parse(cls, text: str) -> IssueRef:
        """``owner/name#42``, or ``https://host/owner/name/issues/42`` (or ``/pull/42``)."""
        given = text.strip()
        short = _SHORT.match(given)
        if short is None and given.startswith(("https://", "http://")):
            short = _PATH.match(urlsplit(given).path)
        if short is None or ".." in short.group(2):
            raise ForgeError(f"{text!r} does not name an issue: write owner/name#42 or the issue's URL",
                             code="bad_issue_ref")
        return cls(short.group(1), short.group(2).removesuffix(".git"), int(short.group(3)))


def looks_like_issue_ref(text: str) -> bool:
    """Whether ``--issue`` was given a forge issue rather than a Markdown file."""
    try:
        IssueRef.parse(text)
    except ForgeError:
        return False
    return True
