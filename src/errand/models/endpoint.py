"""Which model a task talks to, and where: a value resolved where the task is submitted.

A :class:`ModelEndpoint` names the provider, the provider's model name, the
endpoint's base URL and the *name* of the environment variable that holds the
key. A task records one at submission and every worker that runs the task uses
exactly it, so a worker started with another ``OPENAI_BASE_URL`` cannot send
the task elsewhere. :func:`open_model` builds the client from the record,
reading the key from the worker's own environment by the recorded name.

The key itself is never recorded. Beside its variable's name the record keeps
a *fingerprint* of the key the submitter had: ``salt:digest``, the first 48
bits of HMAC-SHA256 keyed by a fresh random salt. That is enough for a worker
to tell that its key is not the submitter's, and too little to learn anything
about a key of real entropy (a guessable key, such as the placeholder a local
server is given, is no secret either way).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal
from urllib.parse import urlsplit

from errand.errors import ConfigError
from errand.models.errors import ModelError
from errand.models.profiles import ModelProfile, Pricing, profile_for
from errand.models.protocol import Model

__all__ = [
    "BASE_URL_VARIABLES",
    "DEFAULT_BASE_URLS",
    "KEY_VARIABLES",
    "PROVIDERS",
    "KeyStatus",
    "ModelEndpoint",
    "fingerprint",
    "fingerprint_matches",
    "open_model",
    "valid_variable",
]

PROVIDERS = ("openai", "anthropic", "gemini", "scripted")
#: Providers only an agent CLI talks to (through the model gateway): errand's own loop has no client for them.
CLI_ONLY_PROVIDERS = ("gemini",)
#: Where each provider's SDK goes when nothing says otherwise.
DEFAULT_BASE_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com",
                     "gemini": "https://generativelanguage.googleapis.com"}
#: The variables an ad-hoc ``provider:model`` takes its endpoint and key from, errand's first.
BASE_URL_VARIABLES = {"openai": ("ERRAND_OPENAI_BASE_URL", "OPENAI_BASE_URL"),
                      "anthropic": ("ERRAND_ANTHROPIC_BASE_URL", "ANTHROPIC_BASE_URL"),
                      "gemini": ("ERRAND_GEMINI_BASE_URL", "GOOGLE_GEMINI_BASE_URL")}
KEY_VARIABLES = {"openai": ("ERRAND_OPENAI_API_KEY", "OPENAI_API_KEY"),
                 "anthropic": ("ERRAND_ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY"),
                 "gemini": ("ERRAND_GEMINI_API_KEY", "GEMINI_API_KEY")}

#: What a client is given for an endpoint that needs no key.
NO_KEY = "no-key"
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGEST_HEX = 12  # 48 bits
_OVERRIDES: dict[str, Any] = {"context_window": None, "pricing": None, "stream": False}

#: How a key in some environment compares with the one a record was made with.
KeyStatus = Literal["none", "missing", "same", "differs", "unknown"]


@dataclass(frozen=True)
class ModelEndpoint:
    """A model at an endpoint: ``provider`` (openai | anthropic | gemini | scripted), ``model`` (the
    provider's name for it; a script's absolute path for scripted), ``base_url``, and
    ``api_key_env``, the variable holding the key. ``name`` is the ``[models.NAME]`` it
    came from, if any; ``key_fingerprint`` is that of the submitter's key.
    ``context_window`` and ``pricing``, when set, override errand's table of
    models (:mod:`errand.models.profiles`); ``stream`` asks for streamed replies."""

    provider: str
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    key_fingerprint: str | None = None
    name: str | None = None
    context_window: int | None = None
    pricing: Pricing | None = None
    stream: bool = False

    def __post_init__(self) -> None:
        ModelProfile(self.context_window)  # validates the window
        if self.provider not in PROVIDERS:
            raise ConfigError(f"unknown model provider {self.provider!r}; providers are {', '.join(PROVIDERS)}",
                              code="unknown_model")
        if not isinstance(self.model, str) or not self.model.strip():
            raise ConfigError("a model needs the provider's model name", code="unknown_model")
        if self.provider == "scripted":
            if self.base_url is not None or self.api_key_env is not None:
                raise ConfigError("a scripted model has no endpoint or key", code="invalid_config")
            return
        if not isinstance(self.base_url, str) or not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"the base URL of {self.spec} must be an http:// or https:// URL", code="invalid_config")
        if "@" in urlsplit(self.base_url).netloc:
            # A task records its base URL; credentials in it would be a key in the task store.
            raise ConfigError(f"the base URL of {self.spec} carries credentials; put the key in a variable and "
                              "name it (api_key_env)", code="invalid_config")
        if self.api_key_env is not None and not valid_variable(self.api_key_env):
            # Never echo the value: a key pasted here by mistake must not reach a log.
            raise ConfigError("api_key_env names the environment variable that holds the key "
                              "(letters, digits and _), not the key itself", code="invalid_config")

    @property
    def spec(self) -> str:
        return f"{self.provider}:{self.model}"

    def describe(self) -> str:
        """``local = openai:qwen at http://127.0.0.1:8000/v1, key $LOCAL_KEY``."""
        text = f"{self.name} = {self.spec}" if self.name else self.spec
        if self.base_url is not None:
            text += f" at {self.base_url}"
        if self.api_key_env is not None:
            text += f", key ${self.api_key_env}"
        return text

    def with_key_from(self, environ: Mapping[str, str]) -> ModelEndpoint:
        """This endpoint with the fingerprint of the key ``environ`` holds (none if it holds none)."""
        key = environ.get(self.api_key_env) if self.api_key_env else None
        return _replace(self, key_fingerprint=fingerprint(key) if key else None)

    def key_status(self, environ: Mapping[str, str]) -> KeyStatus:
        """``none`` (needs no key), ``missing``, ``same`` or ``differs`` from the submitter's,
        or ``unknown`` (the record has no fingerprint to compare with)."""
        if self.api_key_env is None:
            return "none"
        key = environ.get(self.api_key_env)
        if not key:
            return "missing"
        if self.key_fingerprint is None:
            return "unknown"
        return "same" if fingerprint_matches(self.key_fingerprint, key) else "differs"

    @property
    def profile(self) -> ModelProfile:
        """The model's window and prices: errand's table, with this endpoint's overrides."""
        return profile_for(self.model).overridden(self.context_window, self.pricing)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        # The overrides only when set: a record without them reads as before they existed.
        for key, default in _OVERRIDES.items():
            if data[key] == default:
                del data[key]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelEndpoint:
        fields = cls.__dataclass_fields__
        known = {key: value for key, value in data.items() if key in fields}
        if isinstance(known.get("pricing"), Mapping):
            known["pricing"] = Pricing(**known["pricing"])
        return cls(**known)


def _replace(endpoint: ModelEndpoint, **changes: Any) -> ModelEndpoint:
    return replace(endpoint, **changes)


def valid_variable(name: object) -> bool:
    """Whether ``name`` can be an environment variable's name."""
    return isinstance(name, str) and _VARIABLE.fullmatch(name) is not None


def fingerprint(key: str, salt: str | None = None) -> str:
    """``salt:digest`` of ``key``; a fresh salt unless one is given."""
    salt = salt or secrets.token_hex(4)
    digest = hmac.new(salt.encode(), key.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()
    return f"{salt}:{digest[:_DIGEST_HEX]}"


def fingerprint_matches(recorded: str, key: str) -> bool:
    salt, colon, _ = recorded.partition(":")
    return bool(colon) and hmac.compare_digest(fingerprint(key, salt), recorded)


def open_model(endpoint: ModelEndpoint, environ: Mapping[str, str]) -> Model:
    """The client for ``endpoint``, its key read from ``environ`` by the recorded name.

    Raises :class:`ModelError` with code ``model_key_missing`` when the variable is not
    set there: a worker never falls back to a key or endpoint of its own.
    """
    if endpoint.provider == "scripted":
        from errand.models.scripted import ScriptedModel

        return ScriptedModel.from_file(endpoint.model)
    # No key variable: the endpoint wants none, but the SDKs want some string (and would read
    # their own variable in the worker's environment if given None).
    key = environ.get(endpoint.api_key_env) if endpoint.api_key_env else NO_KEY
    if not key:
        raise ModelError(f"{endpoint.describe()}: its API key variable ${endpoint.api_key_env} is not set here "
                         "(any non-empty value serves a server that needs no key)", provider=endpoint.provider,
                         code="model_key_missing")
    if endpoint.provider in CLI_ONLY_PROVIDERS:
        raise ModelError(f"{endpoint.describe()}: errand's own agent has no client for {endpoint.provider}'s API; "
                         "its models are an agent CLI's (gemini: --agent gemini-cli)", provider=endpoint.provider,
                         code="provider_cli_only")
    if endpoint.provider == "openai":
        from errand.models.openai_adapter import OpenAIModel

        return OpenAIModel(endpoint.model, base_url=endpoint.base_url, api_key=key, stream=endpoint.stream,
                           profile=endpoint.profile)
    from errand.models.anthropic_adapter import AnthropicModel

    return AnthropicModel(endpoint.model, base_url=endpoint.base_url, api_key=key, stream=endpoint.stream,
                          profile=endpoint.profile)
