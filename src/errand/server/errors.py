"""Errors of the server and its client, beneath :class:`errand.errors.ErrandError`::

    ErrandError
    ├── ServerError              the server could not be reached, or did not answer as errand's API
    └── CsrfError                a form post without this session's CSRF token was refused
"""

from __future__ import annotations

from errand.errors import ErrandError

__all__ = ["CsrfError", "ServerError"]


class ServerError(ErrandError):
    """The server could not be reached, or answered with something that is not errand's API."""

    code = "server_error"


class CsrfError(ErrandError):
    """A form post did not carry this session's CSRF token; nothing was changed."""

    code = "csrf_failed"
