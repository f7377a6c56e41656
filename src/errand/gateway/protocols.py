"""What the gateway knows of each provider's wire: its routes, where its key goes, its error
bodies, and where its usage is reported, in a reply and in a stream.

Pure functions of a request's path, headers and bodies: no sockets here, so every
row is tested on its own. Four protocols:

``anthropic``          Messages API (``/v1/messages``): Claude Code
``openai-responses``   Responses API (``/responses``): Codex
``openai-chat``        chat completions (``/chat/completions``): OpenCode, aider, mini-swe-agent
``gemini``             ``models/M:generateContent`` and ``:streamGenerateContent``: Gemini CLI

Usage becomes errand's :class:`~errand.models.Usage` (``input_tokens`` is the
whole prompt, cached parts included), so prices come from errand's one table
(:func:`~errand.models.profile_for`) or a grant's own :class:`~errand.models.Pricing`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from errand.models import Usage

__all__ = ["PROTOCOLS", "Protocol", "Route", "error_body", "route_of", "usage_of_event", "usage_of_reply",
           "with_output_cap"]

Protocol = Literal["anthropic", "openai-responses", "openai-chat", "gemini"]
PROTOCOLS: tuple[Protocol, ...] = get_args(Protocol)

#: The path a grant's base URL ends in, per protocol: what each SDK appends its routes to.
BASE_PATHS: dict[Protocol, str] = {"anthropic": "", "openai-responses": "/v1", "openai-chat": "/v1", "gemini": ""}

_MODELS = [("GET", re.compile(r"/models(/[^/]+)?"), False)]
_GEMINI_VERSION = r"/v1(?:beta|alpha)?"
# (method, path relative to the base, generates: metered and refused once the budget is spent)
_ROUTES: dict[Protocol, list[tuple[str, re.Pattern[str], bool]]] = {
    "anthropic": [("POST", re.compile(r"/v1/messages"), True),
                  ("POST", re.compile(r"/v1/messages/count_tokens"), False),
                  ("GET", re.compile(r"/v1/models(/[^/]+)?"), False)],
    "openai-responses": [("POST", re.compile(r"/responses"), True), *_MODELS],
    "openai-chat": [("POST", re.compile(r"/chat/completions"), True), *_MODELS],
    "gemini": [("POST", re.compile(_GEMINI_VERSION + r"/models/[^/:]+:(?:streamGenerateContent|generateContent)"),
                True),
               ("POST", re.compile(_GEMINI_VERSION + r"/models/[^/:]+:countTokens"), False),
               ("GET", re.compile(_GEMINI_VERSION + r"/models(/[^/]+)?"), False)],
}
_GEMINI_MODEL = re.compile(r"/models/([^/:]+):")


@dataclass(frozen=True)
class Route:
    """A request the protocol serves: its path relative to the base, and whether it generates."""

    relative: str
    generates: bool


def route_of(protocol: Protocol, method: str, path: str) -> Route | None:
    """The route ``method path`` (the request's own path) takes under ``protocol``; None when the
    protocol has no such route (the gateway refuses it)."""
    base = BASE_PATHS[protocol]
    if not path.startswith(base + "/"):
        return None
    relative = path[len(base):]
    for route_method, pattern, generates in _ROUTES[protocol]:
        if route_method == method and pattern.fullmatch(relative):
            return Route(relative, generates)
    return None


def protocol_guess(path: str, headers: Mapping[str, str]) -> Protocol:
    """Which provider a request (with no valid token) is talking to, so its refusal comes in
    that provider's shape: by its path, then by the header that carried its key."""
    if "/messages" in path or "x-api-key" in headers:
        return "anthropic"
    if ("/models/" in path and ":" in path) or "x-goog-api-key" in headers:
        return "gemini"
    return "openai-responses" if path.endswith("/responses") else "openai-chat"


# ------------------------------------------------------------------ errors


def error_body(protocol: Protocol, status: int, kind: str, message: str) -> dict[str, Any]:
    """The provider's own error body for ``status``; ``kind`` is errand's name for what happened
    (``authentication``, ``not_found``, ``budget``, ``upstream``, ``invalid``)."""
    if protocol == "anthropic":
        anthropic_types = {"authentication": "authentication_error", "not_found": "not_found_error",
                           "budget": "invalid_request_error", "upstream": "api_error",
                           "invalid": "invalid_request_error"}
        return {"type": "error", "error": {"type": anthropic_types[kind], "message": message}}
    if protocol == "gemini":
        statuses = {"authentication": "UNAUTHENTICATED", "not_found": "NOT_FOUND", "budget": "RESOURCE_EXHAUSTED",
                    "upstream": "UNAVAILABLE", "invalid": "INVALID_ARGUMENT"}
        return {"error": {"code": status, "message": message, "status": statuses[kind]}}
    openai_types = {"authentication": ("invalid_request_error", "invalid_api_key"),
                    "not_found": ("invalid_request_error", None),
                    "budget": ("insufficient_quota", "insufficient_quota"),
                    "upstream": ("server_error", None), "invalid": ("invalid_request_error", None)}
    kind_type, code = openai_types[kind]
    return {"error": {"message": message, "type": kind_type, "param": None, "code": code}}


#: The status each provider answers each kind of refusal with.
def error_status(protocol: Protocol, kind: str) -> int:
    if kind == "budget":
        # Anthropic answers an exhausted credit balance 400 (not retried); OpenAI and Gemini 429.
        return 400 if protocol == "anthropic" else 429
    return {"authentication": 401, "not_found": 404, "upstream": 502, "invalid": 400}[kind]


# ------------------------------------------------------------------ usage


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _anthropic_usage(usage: Mapping[str, Any]) -> Usage:
    read, write = _int(usage.get("cache_read_input_tokens")), _int(usage.get("cache_creation_input_tokens"))
    return Usage(_int(usage.get("input_tokens")) + read + write, _int(usage.get("output_tokens")), read, write)


def _openai_usage(usage: Mapping[str, Any], prompt: str, completion: str, details: str) -> Usage:
    cached = usage.get(details)
    read = _int(cached.get("cached_tokens")) if isinstance(cached, Mapping) else 0
    return Usage(_int(usage.get(prompt)), _int(usage.get(completion)), read)


def _gemini_usage(usage: Mapping[str, Any]) -> Usage:
    prompt = _int(usage.get("promptTokenCount")) + _int(usage.get("toolUsePromptTokenCount"))
    output = _int(usage.get("candidatesTokenCount")) + _int(usage.get("thoughtsTokenCount"))
    return Usage(prompt, output, _int(usage.get("cachedContentTokenCount")))


def usage_of_reply(protocol: Protocol, body: Any) -> Usage | None:
    """The usage a whole (not streamed) reply reports; None if it reports none."""
    if not isinstance(body, Mapping):
        return None
    if protocol == "gemini":
        usage = body.get("usageMetadata")
        return _gemini_usage(usage) if isinstance(usage, Mapping) else None
    usage = body.get("usage")
    if not isinstance(usage, Mapping):
        return None
    if protocol == "anthropic":
        return _anthropic_usage(usage)
    if protocol == "openai-chat":
        return _openai_usage(usage, "prompt_tokens", "completion_tokens", "prompt_tokens_details")
    return _openai_usage(usage, "input_tokens", "output_tokens", "input_tokens_details")


_RESPONSES_ENDS = ("response.completed", "response.incomplete", "response.failed")


@dataclass(frozen=True)
class EventUsage:
    """What one server-sent event says: the usage so far (None: nothing new), and whether it
    is the stream's last event (so a stream that ends before one was cut)."""

    usage: Usage | None = None
    final: bool = False


def usage_of_event(protocol: Protocol, data: str, so_far: Usage | None) -> EventUsage:
    """Read one event's ``data``. Anthropic reports the prompt at ``message_start`` and the
    output so far at each ``message_delta``; OpenAI chat in one chunk of its own (when asked
    with ``stream_options.include_usage``) before ``[DONE]``; the Responses API at its last
    event; Gemini with every chunk, the last one whole."""
    if data.strip() == "[DONE]":
        return EventUsage(final=protocol == "openai-chat")
    try:
        event = json.loads(data)
    except ValueError:
        return EventUsage()
    if not isinstance(event, Mapping):
        return EventUsage()
    if protocol == "anthropic":
        return _anthropic_event(event, so_far)
    if protocol == "openai-responses":
        kind = event.get("type")
        response = event.get("response")
        usage = usage_of_reply(protocol, response) if isinstance(response, Mapping) else None
        return EventUsage(usage, kind in _RESPONSES_ENDS or kind == "error")
    if protocol == "gemini":
        candidates = event.get("candidates")
        final = isinstance(candidates, list) and any(
            isinstance(c, Mapping) and c.get("finishReason") for c in candidates)
        return EventUsage(usage_of_reply(protocol, event), final)
    return EventUsage(usage_of_reply(protocol, event))


def _anthropic_event(event: Mapping[str, Any], so_far: Usage | None) -> EventUsage:
    kind = event.get("type")
    if kind == "message_start":
        message = event.get("message")
        usage = message.get("usage") if isinstance(message, Mapping) else None
        return EventUsage(_anthropic_usage(usage) if isinstance(usage, Mapping) else None)
    if kind == "message_delta" and isinstance(event.get("usage"), Mapping):
        delta = event["usage"]
        start = so_far or Usage()
        # The delta's counts are cumulative; the prompt's fields appear in it only on newer APIs.
        read = _int(delta.get("cache_read_input_tokens")) if "cache_read_input_tokens" in delta \
            else start.cache_read_tokens
        write = _int(delta.get("cache_creation_input_tokens")) if "cache_creation_input_tokens" in delta \
            else start.cache_write_tokens
        uncached = _int(delta["input_tokens"]) if "input_tokens" in delta else start.uncached_input_tokens
        output = _int(delta["output_tokens"]) if "output_tokens" in delta else start.output_tokens
        return EventUsage(Usage(uncached + read + write, output, read, write))
    return EventUsage(final=kind in ("message_stop", "error"))


def model_of(protocol: Protocol, relative: str, body: Any) -> str | None:
    """The model a request names: in its body, or (Gemini) in its path."""
    if protocol == "gemini":
        found = _GEMINI_MODEL.search(relative)
        return found.group(1) if found else None
    model = body.get("model") if isinstance(body, Mapping) else None
    return model if isinstance(model, str) and model else None


def wants_stream(protocol: Protocol, relative: str, body: Any) -> bool:
    if protocol == "gemini":
        return ":streamGenerateContent" in relative
    return isinstance(body, Mapping) and body.get("stream") is True


def with_stream_usage(protocol: Protocol, body: Any) -> Any:
    """A streamed chat-completions request, asking for the usage chunk it would not otherwise get
    (``stream_options.include_usage``): without it a streamed call could not be metered."""
    if protocol != "openai-chat" or not isinstance(body, dict) or body.get("stream") is not True:
        return None
    options = body.get("stream_options")
    if isinstance(options, Mapping) and options.get("include_usage") is True:
        return None
    return {**body, "stream_options": {**(options if isinstance(options, Mapping) else {}), "include_usage": True}}


# ------------------------------------------------------------------ output caps

#: Where each protocol's request names the most tokens its reply may have (per choice; the first
#: is the current name); and where it asks for several choices at once.
_OUTPUT_LIMITS: dict[Protocol, tuple[str, ...]] = {"anthropic": ("max_tokens",),
                                                   "openai-chat": ("max_completion_tokens", "max_tokens"),
                                                   "openai-responses": ("max_output_tokens",),
                                                   "gemini": ("maxOutputTokens",)}
#: A reply limit every model takes. A call that names none is given one only under this many tokens
#: left: a larger one could pass a model's own most (OpenAI refuses a max_completion_tokens above it).
SAFE_LIMIT = 4096
_CHOICES: dict[Protocol, str | None] = {"anthropic": None, "openai-chat": "n", "openai-responses": None,
                                        "gemini": "candidateCount"}


def with_output_cap(protocol: Protocol, body: Any, cap: int) -> tuple[dict[str, Any], int] | None:
    """``body`` with its reply held to ``cap`` tokens over all the choices it asks for, and the
    tokens it may now spend at most; None when it cannot be held (not a JSON object, more
    choices than tokens, a Gemini request's ``generation_config`` spelt so a second limit could
    hide in it). Every limit it named is replaced by the one written (never higher than it
    asked), so no reader of the request can take another; one that named none is given one
    once ``cap`` is at most :data:`SAFE_LIMIT` per choice."""
    if not isinstance(body, dict) or "generation_config" in body:
        return None
    holder: dict[str, Any] = body
    if protocol == "gemini":
        config = body.get("generationConfig", {})
        if not isinstance(config, dict):
            return None
        holder = dict(config)
    choices_key = _CHOICES[protocol]
    choices = holder.get(choices_key, 1) if choices_key else 1
    choices = 1 if choices is None else choices
    if isinstance(choices, bool) or not isinstance(choices, int) or choices < 1 or cap // choices < 1:
        return None
    names = _OUTPUT_LIMITS[protocol]
    asked = [name for name in names if holder.get(name) is not None]
    each = cap // choices
    if not asked and each > SAFE_LIMIT:
        return body, 0  # the model's own most bounds it (not known here, so not held)
    for name in asked:
        value = holder[name]
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            each = min(each, value)
    capped = {key: value for key, value in holder.items() if key not in names}
    # The name the client used (it knows which its server reads), else the protocol's current one.
    capped[asked[0] if len(asked) == 1 else names[0]] = each
    if protocol == "gemini":
        return {**body, "generationConfig": capped}, each * choices
    return capped, each * choices
