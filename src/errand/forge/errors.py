"""The forge's errors: what went wrong talking to GitHub (or pushing to it).

``ForgeError`` is an :class:`~errand.errors.ErrandError`; branch on ``.code``:
``forge_auth`` (the token was refused or lacks a permission), ``forge_not_found``,
``forge_rate_limited`` (still limited after the retries), ``forge_refused`` (a 422:
the forge validated the request and said no, say a pull request whose branch is
missing), ``forge_unreachable`` (network), ``push_failed``, ``bad_issue_ref``,
``bad_signature``, ``forge_not_configured``.
"""

from __future__ import annotations

from errand.errors import ErrandError

__all__ = ["ForgeError"]


class ForgeError(ErrandError):
    """A forge request or push failed; ``status`` is the HTTP status when there was one."""

    code = "forge_error"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None) -> None:
        super().__init__(message, code=code)
        self.status = status
