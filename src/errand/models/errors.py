"""The error a model adapter raises: one class, under errand's base error.

::

    ErrandError
    └── ModelError    a model call failed: the provider refused or could not be
                      reached, its reply was unusable, or a script ran out

``provider`` names the adapter (``"openai"``, ``"anthropic"``, ``"scripted"``);
``status`` is the HTTP status the provider answered with, or ``None`` when
there was no answer (connection refused, timeout) or no HTTP at all.

The adapter classifies the failure, so the caller can act on it without
reading messages: ``retryable`` when the same request may well succeed later
(rate limits, overload, 5xx, dropped connections and streams, timeouts), with
``retry_after`` the seconds the provider asked to wait; ``code`` is
``context_length_exceeded`` when the conversation is longer than the model's
window (``context_window`` then holds the window if the provider named it).
"""

from __future__ import annotations

from errand.errors import ErrandError

__all__ = ["CONTEXT_LENGTH_EXCEEDED", "ModelError"]

CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"


class ModelError(ErrandError):
    """A model call failed; ``provider`` and ``status`` say where and how."""

    code = "model_error"

    def __init__(
        self, message: str, *, provider: str, status: int | None = None, code: str | None = None,
        retryable: bool = False, retry_after: float | None = None, context_window: int | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.provider = provider
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.context_window = context_window
