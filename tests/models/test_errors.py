"""A model call's one error: it says which adapter failed and how, so a caller branches on its fields
and ``.code`` (retry, condense, give up) without reading its message."""

from __future__ import annotations

import asyncio

import pytest

from errand.errors import ErrandError
from errand.models import Message, ModelError, ScriptedModel
from errand.models.errors import CONTEXT_LENGTH_EXCEEDED


def test_a_model_error_is_final_and_unclassified_unless_the_adapter_says_otherwise() -> None:
    error = ModelError("m answered HTTP 401: bad key", provider="openai", status=401)
    assert isinstance(error, ErrandError) and error.code == "model_error" and error.message.endswith("bad key")
    assert (error.provider, error.status, error.retryable, error.retry_after, error.context_window) == (
        "openai", 401, False, None, None)
    overflow = ModelError("too long", provider="anthropic", status=400, code=CONTEXT_LENGTH_EXCEEDED,
                          context_window=200_000)
    assert overflow.code == "context_length_exceeded" and overflow.context_window == 200_000
    assert ModelError.code == "model_error"  # one error's code is its own, not its class's


def test_a_script_that_ran_out_is_a_model_error_of_its_own_code_and_no_retry() -> None:
    model = ScriptedModel(["only reply"])
    asyncio.run(model.complete([Message("user", "hi")], []))
    with pytest.raises(ModelError) as exhausted:
        asyncio.run(model.complete([Message("user", "again")], []))
    assert (exhausted.value.provider, exhausted.value.code, exhausted.value.retryable) == (
        "scripted", "script_exhausted", False)
    assert exhausted.value.status is None and "ran out of replies after 1" in exhausted.value.message
