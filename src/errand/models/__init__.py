"""errand.models: language models behind one small protocol.

Name a model ``provider:model`` and call :func:`get_model`::

    openai:gpt-4.1             OpenAI, or any OpenAI-compatible server by base URL
    anthropic:claude-sonnet-4-5
    scripted:path/to/script.jsonl   replays a script (tests and demos)

Every model is a :class:`Model`: ``await model.complete(messages, tools)``
returns a :class:`Reply`. Failures raise :class:`ModelError`, classified
(``retryable``, ``retry_after``, ``context_length_exceeded``) for the caller
to act on. A model's :class:`ModelProfile` (context window, :class:`Pricing`)
comes from errand's table (:func:`profile_for`), overridable per named model.

A task does not keep the spec alone: :meth:`Catalog.resolve` turns a spec (a
``[models.NAME]`` from errand's settings file, or ``provider:model``) into a
:class:`ModelEndpoint` — provider, model, base URL, the name of the key's
variable — in the submitter's environment, and :func:`open_model` builds the
client from that record wherever the task runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from errand.errors import ConfigError
from errand.models.catalog import Catalog
from errand.models.endpoint import DEFAULT_BASE_URLS, PROVIDERS, ModelEndpoint, open_model
from errand.models.errors import CONTEXT_LENGTH_EXCEEDED, ModelError
from errand.models.profiles import ModelProfile, Pricing, profile_for
from errand.models.protocol import Message, Model, Reply, Role, Tool, ToolCall, Usage
from errand.models.scripted import ScriptedModel

if TYPE_CHECKING:
    from errand.models.anthropic_adapter import AnthropicModel
    from errand.models.openai_adapter import OpenAIModel

__all__ = [
    "CONTEXT_LENGTH_EXCEEDED",
    "PROVIDERS",
    "AnthropicModel",
    "Catalog",
    "Message",
    "Model",
    "ModelEndpoint",
    "ModelError",
    "ModelProfile",
    "OpenAIModel",
    "Pricing",
    "Reply",
    "Role",
    "ScriptedModel",
    "Tool",
    "ToolCall",
    "Usage",
    "get_model",
    "open_model",
    "profile_for",
]


def get_model(spec: str) -> Model:
    """The model named by ``spec`` (``openai:NAME``, ``anthropic:NAME`` or ``scripted:PATH``),
    set up from this process's environment as each SDK reads it.

    Raises :class:`~errand.errors.ConfigError` for a malformed spec or unknown
    provider, and :class:`ModelError` when a provider's client cannot be set up.
    """
    provider, colon, name = spec.partition(":")
    provider = provider.strip().lower()
    name = name.strip()
    if not colon or not provider or not name:
        raise ConfigError(
            f"model {spec!r} is not of the form provider:model; providers are {', '.join(PROVIDERS)} "
            "(e.g. openai:gpt-4.1, anthropic:claude-sonnet-4-5, scripted:demo.jsonl)"
        )
    if provider == "openai":
        from errand.models.openai_adapter import OpenAIModel

        return OpenAIModel(name)
    if provider == "anthropic":
        from errand.models.anthropic_adapter import AnthropicModel

        return AnthropicModel(name)
    if provider == "scripted":
        return ScriptedModel.from_file(name)
    if provider in PROVIDERS:  # one only an agent CLI talks to
        return open_model(ModelEndpoint(provider, name, base_url=DEFAULT_BASE_URLS[provider]), {})
    raise ConfigError(f"unknown model provider {provider!r} in {spec!r}; providers are {', '.join(PROVIDERS)}")


def __getattr__(name: str) -> Any:
    # The provider SDKs take seconds to import; only a process that uses one pays for it.
    if name == "OpenAIModel":
        from errand.models.openai_adapter import OpenAIModel

        return OpenAIModel
    if name == "AnthropicModel":
        from errand.models.anthropic_adapter import AnthropicModel

        return AnthropicModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
