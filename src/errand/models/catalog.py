"""Named models from errand's settings file, and resolving a model spec in the submitter's environment.

``$ERRAND_HOME/config.toml``::

    model = "local"                  # the default model; ERRAND_MODEL and --model win over it
    agent = "claude-code"            # the default agent (errand's own without it); see errand.agent.seam

    [models.local]
    provider = "openai"              # openai | anthropic | scripted
    model = "qwen2.5-coder:7b"       # the provider's name for the model (a script's path for scripted)
    base_url = "http://127.0.0.1:8000/v1"
    api_key_env = "LOCAL_LLM_KEY"    # the NAME of the variable holding the key, never the key
    context_window = 32768           # tokens; overrides errand's table of models (errand.models.profiles)
    price = { input = 0.5, output = 1.5, cache_read = 0.05, cache_write = 0.625 }   # USD per million tokens
    stream = true                    # ask for streamed replies

    [secrets]                        # for a task's tools: errand.tasks.round.task_secrets
    GH_TOKEN = ["api.github.com"]    # the NAME of the worker's variable, and the hosts it may reach

``base_url`` defaults to the provider's own endpoint and ``api_key_env`` to the
provider's own variable (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``); a named
model never takes either from the environment. The schema is strict: an
unknown table or key is a :class:`~errand.errors.ConfigError` naming it and the
file, since a misspelt ``base_url`` silently ignored would send a task to the
provider's own endpoint.

A spec is a name from the file or an ad-hoc ``provider:model``. An ad-hoc one
takes its endpoint and key variable from the environment it is resolved in
(``ERRAND_OPENAI_BASE_URL``, then ``OPENAI_BASE_URL``, then the provider's
URL; likewise the key and Anthropic's). Names cannot contain ``:``, so the two
never collide. Either way :meth:`Catalog.resolve` gives the
:class:`~errand.models.endpoint.ModelEndpoint` a task records.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from errand import _settings
from errand.errors import ConfigError
from errand.models.endpoint import (
    BASE_URL_VARIABLES,
    DEFAULT_BASE_URLS,
    KEY_VARIABLES,
    PROVIDERS,
    ModelEndpoint,
)
from errand.models.profiles import Pricing

__all__ = ["Catalog", "read_settings"]

MAX_SETTINGS_BYTES = 1024**2
_TOP_LEVEL = ("model", "models", "agent", "secrets")  # secrets: errand.tasks.round.task_secrets
_MODEL_KEYS = ("provider", "model", "base_url", "api_key_env", "context_window", "price", "stream")
_PRICE_KEYS = ("input", "output", "cache_read", "cache_write")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# Keys someone might write to put the key itself in the file; the error says what to do instead.
_SECRET_KEYS = frozenset({"api_key", "key", "token", "secret", "password", "auth_token"})


@dataclass(frozen=True)
class Catalog:
    """The named models (``models``), the ``default`` spec, and the file they came from."""

    models: Mapping[str, ModelEndpoint] = field(default_factory=dict)
    default: str | None = None
    source: Path | None = None
    agent: str | None = None  # the default agent kind, as written (errand.agent.seam checks it)

    @classmethod
    def load(cls, path: Path | None = None) -> Catalog:
        """The catalog in ``path`` (default: errand's settings file); empty when there is no file."""
        path = Path(path) if path is not None else _settings.config_path()
        document = read_settings(path)
        return cls() if document is None else _parse(document, path)

    def resolve(self, spec: str, environ: Mapping[str, str]) -> ModelEndpoint:
        """The endpoint ``spec`` names, with the fingerprint of the key ``environ`` holds for it."""
        text = spec.strip()
        if ":" not in text:
            if text in self.models:
                return self.models[text].with_key_from(environ)
            raise ConfigError(f"unknown model {text!r}: {self._names()}, and an ad-hoc model is written "
                              f"provider:model with a provider of {', '.join(PROVIDERS)}", code="unknown_model")
        provider, _, name = text.partition(":")
        provider, name = provider.strip().lower(), name.strip()
        if provider not in PROVIDERS or not name:
            raise ConfigError(f"unknown model {text!r}: it is not of the form provider:model with a provider of "
                              f"{', '.join(PROVIDERS)} (e.g. openai:gpt-4.1, anthropic:claude-sonnet-4-5, "
                              "scripted:demo.jsonl)", code="unknown_model")
        if provider == "scripted":
            return ModelEndpoint("scripted", str(Path(name).expanduser().resolve()))
        base_url = _first_set(environ, BASE_URL_VARIABLES[provider]) or DEFAULT_BASE_URLS[provider]
        key_variable = next((v for v in KEY_VARIABLES[provider] if environ.get(v)), KEY_VARIABLES[provider][-1])
        return ModelEndpoint(provider, name, base_url=base_url, api_key_env=key_variable).with_key_from(environ)

    def _names(self) -> str:
        if not self.models:
            return "no named models are configured (errand's settings file has none)"
        return f"the named models in {self.source} are {', '.join(sorted(self.models))}"


def read_settings(path: Path) -> dict[str, Any] | None:
    """The TOML document of errand's settings file at ``path``; None when there is none."""
    if not path.exists():
        return None
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_SETTINGS_BYTES + 1)
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}", code="invalid_config") from None
    if len(data) > MAX_SETTINGS_BYTES:
        raise ConfigError(f"{path} is larger than {MAX_SETTINGS_BYTES} bytes", code="invalid_config")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: malformed TOML: {error}", code="invalid_toml") from None


def _first_set(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((environ[name].strip() for name in names if environ.get(name, "").strip()), None)


def _parse(document: Mapping[str, Any], path: Path) -> Catalog:
    _known(document, _TOP_LEVEL, path, "the top level")
    default = document.get("model")
    if default is not None and (not isinstance(default, str) or not default.strip()):
        raise ConfigError(f"{path}: model must be a model's name or provider:model", code="invalid_config")
    tables = document.get("models", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{path}: models must be tables such as [models.NAME]", code="invalid_config")
    models = {name: _named_model(name, table, path) for name, table in tables.items()}
    if default is not None and ":" not in default and default.strip() not in models:
        raise ConfigError(f"{path}: model = {default!r} names no [models.{default.strip()}]", code="unknown_model")
    agent = document.get("agent")
    if agent is not None and (not isinstance(agent, str) or not agent.strip()):
        raise ConfigError(f"{path}: agent must be an agent's name such as \"claude-code\"", code="invalid_config")
    return Catalog(models, default.strip() if default else None, path, agent.strip() if agent else None)


def _named_model(name: str, table: object, path: Path) -> ModelEndpoint:
    where = f"[models.{name}]"
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{path}: {where}: a model's name is letters, digits, '.', '_' and '-' (a ':' would "
                          "read as provider:model)", code="invalid_config")
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {where} must be a table", code="invalid_config")
    secret = sorted(_SECRET_KEYS & set(table))
    if secret:
        raise ConfigError(f"{path}: {where}: {secret[0]!r} is not a setting; the file names the variable that "
                          "holds the key (api_key_env = \"NAME\") and never holds the key itself",
                          code="unknown_key")
    _known(table, _MODEL_KEYS, path, where)
    for key in ("provider", "model"):
        if not isinstance(table.get(key), str) or not table[key].strip():
            raise ConfigError(f"{path}: {where}: {key} must be a non-empty string", code="invalid_config")
    provider = table["provider"].strip().lower()
    if provider not in PROVIDERS:
        raise ConfigError(f"{path}: {where}: unknown provider {provider!r}; providers are {', '.join(PROVIDERS)}",
                          code="unknown_model")
    if provider == "scripted":
        return _scripted(name, table, path, where)
    try:
        return ModelEndpoint(provider, table["model"].strip(), name=name,
                             base_url=_stripped(table.get("base_url", DEFAULT_BASE_URLS[provider])),
                             api_key_env=table.get("api_key_env", KEY_VARIABLES[provider][-1]),
                             context_window=table.get("context_window"), pricing=_pricing(table, path, where),
                             stream=_flag(table, "stream"))
    except ConfigError as error:
        raise ConfigError(f"{path}: {where}: {error.message}", code=error.code) from None


def _pricing(table: Mapping[str, Any], path: Path, where: str) -> Pricing | None:
    price = table.get("price")
    if price is None:
        return None
    if not isinstance(price, dict):
        raise ConfigError(f"{path}: {where}: price must be a table such as {{ input = 3.0, output = 15.0 }}",
                          code="invalid_config")
    _known(price, _PRICE_KEYS, path, f"{where} price")
    if "input" not in price or "output" not in price:
        raise ConfigError(f"{path}: {where}: price needs input and output (dollars per million tokens)",
                          code="invalid_config")
    return Pricing(**price)


def _flag(table: Mapping[str, Any], key: str) -> bool:
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{key} must be true or false, not {value!r}", code="invalid_config")
    return value


def _stripped(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value  # a non-string is ModelEndpoint's to refuse


def _scripted(name: str, table: Mapping[str, Any], path: Path, where: str) -> ModelEndpoint:
    for key in ("base_url", "api_key_env"):
        if key in table:
            raise ConfigError(f"{path}: {where}: a scripted model has no {key}", code="invalid_config")
    script = Path(table["model"].strip()).expanduser()
    return ModelEndpoint("scripted", str((path.parent / script).resolve()), name=name)  # relative to the file


def _known(table: Mapping[str, Any], known: tuple[str, ...], path: Path, where: str) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(f"{path}: unknown key{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(repr(key) for key in unknown)} at {where} (known: {', '.join(known)})",
                          code="unknown_key")
