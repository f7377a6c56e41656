"""Errors raised by :mod:`errand.repo`.

Bad input (a path that is not a git repository, an unknown ref, a malformed URL,
a branch that already exists) is a :class:`errand.errors.ConfigError` with a
stable ``code``; nothing is created when one is raised. A git command that
fails for any other reason is a :class:`RepoError`, which carries the command
line and what git printed on stderr.
"""

from __future__ import annotations

from collections.abc import Sequence

from errand.errors import ErrandError

__all__ = ["RepoError"]


class RepoError(ErrandError):
    """A git command failed; ``command`` is its argv and ``stderr`` what it printed."""

    code = "repo_error"

    def __init__(
        self, message: str, *, command: Sequence[str] = (), stderr: str = "", code: str | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.command = list(command)
        self.stderr = stderr
