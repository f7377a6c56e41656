"""Issue and comment text is untrusted: what the model sees of it, and nothing for a shell.

It only ever becomes part of the agent's instruction (text, never a command). Hidden
HTML comments are dropped because a person reading the issue on the forge does not
see them: an instruction hidden there is one no reviewer saw.
"""

from __future__ import annotations

import re

from errand._text import printable
from errand.forge.records import Comment, Issue
from errand.forge.refs import IssueRef

__all__ = ["MAX_BYTES", "issue_instruction", "visible"]

MAX_BYTES = 90_000  # under the task's 100,000-byte limit, with room for errand's own lines
_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_BOTS = ("errand-bot", "errand[bot]")


def visible(text: str) -> str:
    """``text`` as the forge's page shows it to a person: without HTML comments (an
    unterminated one hides the rest, as it does in a browser), control characters shown."""
    return printable(_HTML_COMMENT.sub("", text).replace("\r\n", "\n")).strip()


def issue_instruction(ref: IssueRef, issue: Issue, *, ask: str | None = None, own_login: str = "") -> str:
    """The instruction for a task from ``issue``: its title, body, labels and every comment
    (errand's own left out), then the ask that started it when a comment did."""
    parts = [f"Resolve {'pull request' if issue.is_pull else 'issue'} {ref}: {visible(issue.title)}"]
    if issue.url:
        parts[0] += f"\n({issue.url})"
    body = visible(issue.body)
    parts.append(body or "(the issue has no description)")
    if issue.labels:
        parts.append("Labels: " + ", ".join(visible(label) for label in issue.labels))
    thread = [_said(c) for c in issue.comments if c.author not in (own_login, *_BOTS) and visible(c.body)]
    if thread:
        parts.append("The discussion on the issue, oldest first:\n\n" + "\n\n".join(thread))
    if ask:
        parts.append(f"What was asked of you: {visible(ask)}")
    return _bounded("\n\n".join(parts))


def _said(comment: Comment) -> str:
    return f"@{comment.author} wrote:\n{visible(comment.body)}"


def _bounded(text: str) -> str:
    data = text.encode()
    if len(data) <= MAX_BYTES:
        return text
    return data[:MAX_BYTES].decode(errors="ignore") + "\n\n(the rest of the thread was cut: it is too long)"
