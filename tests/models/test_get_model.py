from __future__ import annotations

from pathlib import Path

import pytest

import errand.models
from errand.errors import ConfigError
from errand.models import AnthropicModel, ModelError, OpenAIModel, ScriptedModel, get_model


def test_public_names_are_pinned() -> None:
    assert set(errand.models.__all__) == {
        "PROVIDERS", "AnthropicModel", "Catalog", "Message", "Model", "ModelEndpoint", "ModelError", "OpenAIModel",
        "Reply", "Role", "ScriptedModel", "Tool", "ToolCall", "Usage", "get_model", "open_model",
        "CONTEXT_LENGTH_EXCEEDED", "ModelProfile", "Pricing", "profile_for",
    }
    for name in errand.models.__all__:
        assert hasattr(errand.models, name)


def test_openai_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = get_model("openai:gpt-4.1")
    assert isinstance(model, OpenAIModel) and model.name == "openai:gpt-4.1" and model.model == "gpt-4.1"


def test_anthropic_spec_and_provider_case() -> None:
    model = get_model("Anthropic:claude-sonnet-4-5")
    assert isinstance(model, AnthropicModel) and model.name == "anthropic:claude-sonnet-4-5"


def test_model_names_may_contain_colons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_OPENAI_API_KEY", "unused")
    model = get_model("openai:qwen2.5-coder:7b")
    assert isinstance(model, OpenAIModel) and model.model == "qwen2.5-coder:7b"


def test_scripted_spec(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl"
    path.write_text('"hello"\n')
    model = get_model(f"scripted:{path}")
    assert isinstance(model, ScriptedModel) and model.remaining == 1


@pytest.mark.parametrize("spec", ["gpt-4.1", "openai:", "openai:  ", ":gpt", ""])
def test_malformed_spec_lists_providers(spec: str) -> None:
    with pytest.raises(ConfigError, match="provider:model; providers are openai, anthropic, gemini, scripted"):
        get_model(spec)


def test_unknown_provider_lists_providers() -> None:
    with pytest.raises(ConfigError, match=r"unknown model provider 'mistral'.*openai, anthropic, gemini, scripted"):
        get_model("mistral:large")


def test_a_provider_only_an_agent_cli_speaks_says_which_agent() -> None:
    with pytest.raises(ModelError, match="--agent gemini-cli") as caught:
        get_model("gemini:pro")
    assert caught.value.code == "provider_cli_only"


def test_openai_without_any_key_says_which_variable_to_set() -> None:
    with pytest.raises(ModelError, match="ERRAND_OPENAI_API_KEY or OPENAI_API_KEY") as caught:
        get_model("openai:gpt-4.1")
    assert caught.value.provider == "openai" and caught.value.code == "model_error"
