"""A client built from a recorded endpoint talks to that endpoint with the key its variable
holds, whatever base URL and key the process's own environment has (real SDKs, loopback)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from errand.models import Message, ModelEndpoint, ModelError, open_model
from errand.models.endpoint import fingerprint, fingerprint_matches

from .wire import WireServer

OPENAI_REPLY = {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [
    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}]}
ANTHROPIC_REPLY = {"id": "m", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
                   "content": [{"type": "text", "text": "hi"}], "usage": {"input_tokens": 1, "output_tokens": 1}}


@pytest.mark.parametrize(("provider", "reply", "suffix", "path"), [
    ("openai", OPENAI_REPLY, "/v1", "/v1/chat/completions"),
    ("anthropic", ANTHROPIC_REPLY, "", "/v1/messages"),
])
async def test_the_recorded_endpoint_wins_over_the_processs_environment(
        provider: str, reply: dict[str, Any], suffix: str, path: str,
        wire_servers: Callable[[], WireServer], monkeypatch: pytest.MonkeyPatch) -> None:
    own, recorded = wire_servers(), wire_servers()
    upper = provider.upper()
    for variable in (f"{upper}_BASE_URL", f"ERRAND_{upper}_BASE_URL"):
        monkeypatch.setenv(variable, f"{own.url}{suffix}")  # what a worker started elsewhere would have
    monkeypatch.setenv(f"{upper}_API_KEY", "sk-own")
    monkeypatch.setenv("BEE_KEY", "sk-bee")
    recorded.answer(reply)
    endpoint = ModelEndpoint(provider, "m", base_url=f"{recorded.url}{suffix}", api_key_env="BEE_KEY")

    model = open_model(endpoint, os.environ)
    answer = await model.complete([Message("user", "hello")], [])

    assert answer.message.content == "hi"
    assert own.requests == []
    [request] = recorded.requests
    assert request.path == path
    sent = " ".join(request.headers.values())  # the header carrying it differs by SDK version
    assert "sk-bee" in sent and "sk-own" not in sent


def test_a_missing_key_variable_is_named_and_nothing_is_sent(wire: WireServer,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-own")  # another variable's key is not a fallback
    endpoint = ModelEndpoint("openai", "m", base_url=f"{wire.url}/v1", api_key_env="BEE_KEY")
    with pytest.raises(ModelError) as error:
        open_model(endpoint, os.environ)
    assert error.value.code == "model_key_missing" and "$BEE_KEY" in error.value.message
    assert wire.requests == []


def test_fingerprints_are_salted_and_compare_only_the_same_key() -> None:
    first, second = fingerprint("sk-secret"), fingerprint("sk-secret")
    assert first != second and "sk-secret" not in first
    assert fingerprint_matches(first, "sk-secret") and fingerprint_matches(second, "sk-secret")
    assert not fingerprint_matches(first, "sk-secreT") and not fingerprint_matches("garbage", "sk-secret")
