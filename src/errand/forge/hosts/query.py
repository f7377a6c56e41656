"""A backlog query in GitHub's words (``label:bug is:open flaky``), for forges whose issue
lists take filters instead of a search language (Gitea, GitLab)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["IssueQuery"]

# A term: runs of anything but blanks and quotes, and quoted runs (blanks kept), side by side:
# ``label:"good first issue"`` is one term, as GitHub reads it.
_TERM = re.compile(r'(?:[^\s"]+|"[^"]*"?)+')


@dataclass(frozen=True)
class IssueQuery:
    state: str = "open"  # open | closed | all
    labels: tuple[str, ...] = ()
    words: str = ""  # what is left: matched against the title and description

    @classmethod
    def parse(cls, query: str) -> IssueQuery:
        state, labels, words = "open", [], []
        for term in _TERM.findall(query):
            key, _, value = term.partition(":")
            if key == "is" and value in ("open", "closed"):
                state = value
            elif key == "is" and value in ("issue", "all"):
                state = "all" if value == "all" else state
            elif key == "label" and value:
                labels.append(value.replace('"', ""))
            else:
                words.append(term)
        return cls(state, tuple(labels), " ".join(words))
