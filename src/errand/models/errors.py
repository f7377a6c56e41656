"""The error a model adapter raises: one class, under errand's base error.

::

    ErrandError
    └── ModelError    a model call failed: the provider refused or could not be
                      reached, its reply was unusable, or a script ran out

``provider`` names the adapter (``"openai"``, ``"anthropic"``, ``"scripted"``);
``status`` is the HTTP status the provider answered with, or ``None`` when
there was no answer (connection refused, timeout) or no HTTP at all.
"""

from __future__ import annotations

from errand.errors import ErrandError

__all__ = ["ModelError"]


class ModelError(ErrandError):
    """A model call failed; ``provider`` and ``status`` say where and how."""

    code = "model_error"

    def __init__(
        self, message: str, *, provider: str, status: int | None = None, code: str | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.provider = provider
        self.status = status
