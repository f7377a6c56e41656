"""The two providers' wire formats for :class:`~models.wire.WireServer`, as the real services speak them.

Replies (JSON and server-sent events) for OpenAI chat completions and the
Anthropic Messages API, their error bodies (context window, rate limit,
overload), and :class:`Provider`: a simulated service that counts a request's
tokens (four characters of its JSON to a token), refuses one past its window
with its own error body, and reports usage with cache fields the way each
provider caches — Anthropic at the request's ``cache_control`` breakpoints
(a prefix of at least 1,024 tokens), OpenAI automatically on any repeated
prefix of at least 1,024 tokens, in steps of 128.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from models.wire import Answer, Json, Recorded, Stream

Protocol = Literal["openai", "anthropic"]
#: A tool call to send: (id, name, arguments); arguments given as a string go on the wire as they are.
Call = tuple[str, str, dict[str, Any] | str]
MIN_CACHED = 1024


@dataclass(frozen=True)
class Turn:
    """What the simulated model says: text and tool calls."""

    text: str = ""
    calls: list[Call] = field(default_factory=list)


# ------------------------------------------------------------------ OpenAI


def openai_usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _openai_calls(calls: list[Call]) -> list[dict[str, Any]]:
    return [{"id": call_id, "type": "function", "function": {
        "name": name, "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}}
        for call_id, name, arguments in calls]


def openai_completion(turn: Turn, usage: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.calls:
        message["tool_calls"] = _openai_calls(turn.calls)
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "test-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if turn.calls else "stop"}],
            "usage": usage}


def openai_chunks(turn: Turn, usage: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """The stream of ``turn``: text, then each call's name and its arguments in three pieces, then usage."""

    def chunk(delta: dict[str, Any], finish: str | None = None, chunk_usage: Any = None) -> tuple[None, Any]:
        choices = [] if chunk_usage else [{"index": 0, "delta": delta, "finish_reason": finish}]
        return None, {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "test-model",
                      "choices": choices, "usage": chunk_usage}

    events = [chunk({"role": "assistant", "content": turn.text or None})]
    for index, call in enumerate(_openai_calls(turn.calls)):
        arguments = call["function"]["arguments"]
        third = max(len(arguments) // 3, 1)
        events.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                             "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        for start in range(0, len(arguments), third):
            events.append(chunk({"tool_calls": [{"index": index, "function": {
                "arguments": arguments[start:start + third]}}]}))
    events.append(chunk({}, "tool_calls" if turn.calls else "stop"))
    events.append(chunk({}, chunk_usage=usage))
    events.append((None, "[DONE]"))
    return events


def openai_context_error(window: int, tokens: int) -> Json:
    return Json({"error": {
        "message": f"This model's maximum context length is {window} tokens. However, your messages resulted in "
                   f"{tokens} tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}, 400)


def openai_rate_limit(retry_after: str) -> Json:
    return Json({"error": {"message": "Rate limit reached for requests", "type": "requests",
                           "param": None, "code": "rate_limit_exceeded"}}, 429, {"retry-after": retry_after})


def openai_server_error() -> Json:
    return Json({"error": {"message": "The server had an error while processing your request.",
                           "type": "server_error", "param": None, "code": None}}, 500)


# ------------------------------------------------------------------ Anthropic


def anthropic_usage(uncached: int, output: int, read: int = 0, write: int = 0) -> dict[str, Any]:
    return {"input_tokens": uncached, "output_tokens": output, "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write}


def anthropic_message(turn: Turn, usage: dict[str, Any]) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text else []
    content += [{"type": "tool_use", "id": call_id, "name": name, "input": arguments}
                for call_id, name, arguments in turn.calls]
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "test-model", "content": content,
            "stop_reason": "tool_use" if turn.calls else "end_turn", "stop_sequence": None, "usage": usage}


def anthropic_events(turn: Turn, usage: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """The stream of ``turn``: message_start, each block in pieces, message_delta, message_stop."""
    start = anthropic_message(Turn(), {**usage, "output_tokens": 1})
    events: list[tuple[str | None, Any]] = [("message_start", {"type": "message_start", "message": start})]
    index = 0
    if turn.text:
        events += [("content_block_start", {"type": "content_block_start", "index": 0,
                                             "content_block": {"type": "text", "text": ""}}),
                   ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "text_delta", "text": turn.text}}),
                   ("content_block_stop", {"type": "content_block_stop", "index": 0})]
        index = 1
    for offset, (call_id, name, arguments) in enumerate(turn.calls):
        at = index + offset
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        third = max(len(raw) // 3, 1)
        events.append(("content_block_start", {"type": "content_block_start", "index": at, "content_block": {
            "type": "tool_use", "id": call_id, "name": name, "input": {}}}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": at, "delta": {
            "type": "input_json_delta", "partial_json": raw[s:s + third]}}) for s in range(0, len(raw), third)]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": at}))
    events.append(("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": "tool_use" if turn.calls else "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": usage["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def anthropic_error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Json:
    return Json({"type": "error", "error": {"type": kind, "message": message}}, status, headers or {})


def anthropic_context_error(window: int, tokens: int) -> Json:
    return anthropic_error(400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {window} maximum")


# ------------------------------------------------------------------ counting and caching


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def prompt_blocks(protocol: Protocol, body: dict[str, Any]) -> list[tuple[str, bool]]:
    """The request's prompt as (canonical text, carries a cache breakpoint) blocks, in the provider's order."""
    blocks: list[tuple[str, bool]] = []
    for tool in body.get("tools", []):
        blocks.append((json.dumps({k: v for k, v in tool.items() if k != "cache_control"}, sort_keys=True),
                       "cache_control" in tool))
    system = body.get("system")
    if isinstance(system, str):
        blocks.append((system, False))
    for block in system if isinstance(system, list) else []:
        blocks.append((block["text"], "cache_control" in block))
    for message in body["messages"]:
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"text": content}]
        extra = {k: v for k, v in message.items() if k not in ("content", "role")}
        for index, part in enumerate(parts):
            plain = {k: v for k, v in part.items() if k != "cache_control"} if isinstance(part, dict) else part
            prefix = {"role": message["role"], **(extra if index == 0 else {})}
            blocks.append((json.dumps([prefix, plain], sort_keys=True), isinstance(part, dict)
                           and "cache_control" in part))
    return blocks


class PromptCache:
    """Which prompt prefixes a provider has cached, and the usage a request then gets."""

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol
        self._cached: set[str] = set()

    def usage(self, blocks: list[tuple[str, bool]], output: int) -> tuple[int, dict[str, Any]]:
        """The request's total prompt tokens and its usage body."""
        sizes, digests, running, digest = [], [], 0, hashlib.sha256()
        for text, _ in blocks:
            running += _tokens(text)
            digest.update(text.encode() + b"\0")
            sizes.append(running)
            digests.append(digest.hexdigest())
        total = running
        if self.protocol == "anthropic":
            return total, self._anthropic(blocks, sizes, digests, total, output)
        return total, self._openai(sizes, digests, total, output)

    def _anthropic(self, blocks: list[tuple[str, bool]], sizes: list[int], digests: list[str], total: int,
                   output: int) -> dict[str, Any]:
        marks = [i for i, (_, marked) in enumerate(blocks) if marked and sizes[i] >= MIN_CACHED]
        read = max((sizes[i] for i in marks if digests[i] in self._cached), default=0)
        last = max((sizes[i] for i in marks), default=0)
        write = max(last - read, 0)
        self._cached.update(digests[i] for i in marks)
        return anthropic_usage(total - read - write, output, read, write)

    def _openai(self, sizes: list[int], digests: list[str], total: int, output: int) -> dict[str, Any]:
        hit = max((sizes[i] for i in range(len(sizes)) if digests[i] in self._cached), default=0)
        cached = hit // 128 * 128 if hit >= MIN_CACHED else 0
        self._cached.update(digests)
        return openai_usage(total, output, cached)


# ------------------------------------------------------------------ a simulated service


@dataclass
class Provider:
    """A provider playing a model: ``play(step)`` gives the turn for each step (from 1); a request with
    no tools is a request for a summary and gets ``summary``. Refuses requests past ``window`` tokens."""

    protocol: Protocol
    play: Callable[[int], Turn]
    window: int | None = None
    streaming: bool = False
    summary: str = "Notes: the earlier steps ran commands; their output is no longer needed."
    output_tokens: int = 20
    check: Callable[[Recorded], str | None] | None = None
    steps: int = 0
    summaries: int = 0
    refused: int = 0
    largest: int = 0
    problems: list[str] = field(default_factory=list)
    usages: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cache = PromptCache(self.protocol)

    def __call__(self, request: Recorded) -> Answer:
        body = request.body
        blocks = prompt_blocks(self.protocol, body)
        tokens = sum(_tokens(text) for text, _ in blocks)
        if self.window is not None and tokens > self.window:
            self.refused += 1
            return (anthropic_context_error if self.protocol == "anthropic" else openai_context_error)(
                self.window, tokens)
        self.largest = max(self.largest, tokens)
        if body.get("tools"):
            problem = self.check(request) if self.check is not None else None
            if problem:
                self.problems.append(f"step {self.steps + 1}: {problem}")
            self.steps += 1
            turn = self.play(self.steps)
        else:
            self.summaries += 1
            turn = Turn(self.summary)
        _, usage = self.cache.usage(blocks, self.output_tokens)
        self.usages.append(usage)
        return self.reply(turn, usage)

    def reply(self, turn: Turn, usage: dict[str, Any]) -> Answer:
        if self.protocol == "anthropic":
            return Stream(anthropic_events(turn, usage)) if self.streaming else Json(anthropic_message(turn, usage))
        return Stream(openai_chunks(turn, usage)) if self.streaming else Json(openai_completion(turn, usage))
