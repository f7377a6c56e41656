"""A provider's failure classified alike for every adapter: a context overflow with its window,
what is worth retrying, and how long the provider asked to wait."""

from __future__ import annotations

import email.utils
import time
from typing import Any

import pytest

from errand.models._failures import http_failure, retry_after, transport_errors, unreachable
from errand.models.errors import CONTEXT_LENGTH_EXCEEDED


@pytest.mark.parametrize(("status", "retryable"), [(408, True), (409, True), (429, True), (500, True), (503, True),
                                                   (529, True), (400, False), (401, False), (403, False),
                                                   (404, False), (422, False)])
def test_what_is_worth_another_try(status: int, retryable: bool) -> None:
    error = http_failure("gpt-4.1", "openai", status, "it failed", {"retry-after": "3"}, None)
    assert (error.status, error.retryable, error.provider) == (status, retryable, "openai")
    assert error.retry_after == (3.0 if retryable else None)
    assert error.message == f"gpt-4.1 answered HTTP {status}: it failed"


@pytest.mark.parametrize(("message", "body", "window"), [
    ("This model's maximum context length is 16384 tokens.", None, 16384),
    ("invalid_request_error", {"error": {"message": "prompt is too long: 210000 tokens > 200000 maximum"}}, 200000),
    ("bad request", {"error": {"code": "exceed_context_size", "message": "the context size of 4096 is full"}}, 4096),
    ("the request exceeds the available context size", None, None),
    ("bad request", {"code": CONTEXT_LENGTH_EXCEEDED}, None),
])
def test_a_context_overflow_is_named_with_the_window_when_said(message: str, body: Any, window: int | None) -> None:
    error = http_failure("m", "openai", 400, message, {}, body)
    assert error.code == CONTEXT_LENGTH_EXCEEDED and error.context_window == window and not error.retryable
    assert "longer than the model's context window" in error.message


def test_overflow_words_in_a_server_error_are_a_server_error() -> None:
    error = http_failure("m", "openai", 500, "maximum context length is 10 tokens", {}, None)
    assert error.code != CONTEXT_LENGTH_EXCEEDED and error.retryable


@pytest.mark.parametrize(("headers", "seconds"), [
    ({"Retry-After": "7"}, 7.0), ({"retry-after": " 1.5 "}, 1.5), ({"retry-after-ms": "2500"}, 2.5),
    ({"retry-after-ms": "soon", "retry-after": "4"}, 4.0), ({"retry-after": "0"}, 0.0),
    ({"retry-after": "601"}, None), ({"retry-after": "-1"}, None), ({"retry-after": "nan"}, None),
    ({"retry-after": "whenever"}, None), ({}, None),
])
def test_the_wait_the_provider_asked_for(headers: dict[str, str], seconds: float | None) -> None:
    assert retry_after(headers) == seconds


def test_a_wait_given_as_an_http_date() -> None:
    later = email.utils.formatdate(time.time() + 120, usegmt=True)
    waited = retry_after({"retry-after": later})
    assert waited is not None and 100 < waited <= 120
    assert retry_after({"retry-after": email.utils.formatdate(time.time() - 60, usegmt=True)}) is None


def test_an_unreachable_provider_is_worth_another_try_and_names_the_error() -> None:
    error = unreachable("claude-sonnet-4-5", "anthropic", ConnectionRefusedError("refused"))
    assert (error.retryable, error.code) == (True, "model_unreachable")
    assert error.message == "claude-sonnet-4-5 could not be reached: refused"
    assert unreachable("m", "openai", TimeoutError(), what="timed out").message == "m timed out: TimeoutError"


def test_the_http_layer_s_errors_are_known() -> None:
    import httpx

    assert httpx.TransportError in transport_errors()
