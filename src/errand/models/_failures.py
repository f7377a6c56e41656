"""Turning a provider's failure into a classified :class:`ModelError`, alike for every adapter.

The SDKs' own retries are off (errand's loop retries, so each retry is an event
and the waits count against the run's time budget); this module decides what is
worth retrying and how long the provider asked to wait.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from typing import Any

from errand.models.errors import CONTEXT_LENGTH_EXCEEDED, ModelError

__all__ = ["http_failure", "not_a_reply", "transport_errors", "unreachable"]

# 408 timeout, 409 lock conflict, 429 rate limit, 5xx (529 is Anthropic's "overloaded").
_RETRYABLE = frozenset({408, 409, 429})
MAX_RETRY_AFTER = 600.0
# How providers word "the prompt is longer than the window": OpenAI and vLLM ("maximum context length is
# 16384 tokens"), Anthropic ("prompt is too long: 210000 tokens > 200000 maximum"), llama.cpp ("exceeds the
# available context size"), Ollama and others ("context window", "context length").
_CONTEXT_WORDS = re.compile(r"maximum context length|prompt is too long|context (size|window|length)|"
                            r"too many tokens|reduce the length", re.IGNORECASE)
_WINDOW = (re.compile(r"maximum context length is (\d+)", re.IGNORECASE),
           re.compile(r"tokens? > (\d+) maximum", re.IGNORECASE),
           re.compile(r"context (?:size|window|length) (?:of|is) (\d+)", re.IGNORECASE))


def transport_errors() -> tuple[type[BaseException], ...]:
    """What the SDKs' HTTP layer raises when a connection or stream breaks mid-read.

    A cut stream surfaces from the iterator as the HTTP library's own error, not
    the SDK's; the SDKs have used ``httpx`` and its fork ``httpx2``.
    """
    errors: list[type[BaseException]] = []
    for module_name in ("httpx", "httpx2"):
        try:
            module = __import__(module_name)
        except ImportError:
            continue
        errors.append(module.TransportError)
    return tuple(errors)


def http_failure(model_name: str, provider: str, status: int, message: str, headers: Mapping[str, str],
                 body: Any) -> ModelError:
    """The error for an HTTP answer of ``status``: a context overflow, retryable, or final."""
    text = f"{message} {_error_fields(body)}"
    if status in (400, 413, 422) and _is_context_overflow(text):
        window = _window_in(text)
        return ModelError(f"{model_name}: the conversation is longer than the model's context window: {message}",
                          provider=provider, status=status, code=CONTEXT_LENGTH_EXCEEDED, context_window=window)
    retryable = status in _RETRYABLE or status >= 500
    return ModelError(f"{model_name} answered HTTP {status}: {message}", provider=provider, status=status,
                      retryable=retryable, retry_after=retry_after(headers) if retryable else None)


def unreachable(model_name: str, provider: str, error: BaseException, *, what: str = "could not be reached"
                ) -> ModelError:
    """A connection refused or dropped, a timeout, a stream cut short: worth another try."""
    return ModelError(f"{model_name} {what}: {str(error) or type(error).__name__}", provider=provider, retryable=True,
                      code="model_unreachable")


def not_a_reply(model_name: str, provider: str, body: str) -> ModelError:
    """A 200 whose body is not the JSON reply asked for (the SDK hands back the text): an HTML
    page at a wrong base URL, a stream answering a request that asked for none."""
    start = " ".join(body.split())[:160]
    return ModelError(f"{model_name} answered with something that is not a {provider} reply: {start!r}",
                      provider=provider, code="not_a_reply")


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait a provider asked for, in seconds: ``retry-after-ms``, ``retry-after`` as seconds or
    as an HTTP date; ``None`` when absent, unreadable or absurd (past ten minutes)."""
    lowered = {key.lower(): value for key, value in headers.items()}
    seconds: float | None = None
    if "retry-after-ms" in lowered:
        seconds = _number(lowered["retry-after-ms"], 1000)
    if seconds is None and "retry-after" in lowered:
        seconds = _number(lowered["retry-after"], 1)
        if seconds is None:
            parsed = email.utils.parsedate_tz(lowered["retry-after"])
            if parsed is not None:
                seconds = email.utils.mktime_tz(parsed) - time.time()
    if seconds is None or not 0 <= seconds <= MAX_RETRY_AFTER:
        return None
    return seconds


def _number(text: str, divisor: float) -> float | None:
    try:
        value = float(text.strip()) / divisor
    except ValueError:
        return None
    return value if value == value else None  # NaN


def _error_fields(body: Any) -> str:
    error = body.get("error", body) if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return ""
    return " ".join(str(error.get(key) or "") for key in ("code", "type", "message"))


def _is_context_overflow(text: str) -> bool:
    return CONTEXT_LENGTH_EXCEEDED in text or "exceed_context_size" in text or bool(_CONTEXT_WORDS.search(text))


def _window_in(text: str) -> int | None:
    for pattern in _WINDOW:
        match = pattern.search(text)
        if match:
            return int(match.group(1))
    return None
