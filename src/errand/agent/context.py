"""Keeping what the model is shown inside its context window.

The trajectory (:attr:`Agent.messages <errand.agent.Agent.messages>`) stays whole;
:meth:`Context.view` is what each request sends, made from it in two ways:

- **A used observation is shortened.** A tool result (or a long argument, such
  as a file written whole) is sent in full once; after the model has answered
  it, the request keeps its head and tail only. The shortening is the same in
  every later request, so the prefix stays byte-identical and a provider's
  prompt cache keeps hitting.
- **Older steps are condensed.** When a request would pass ``condense_at`` of
  the window, the oldest steps are replaced by a summary the model writes
  (:meth:`Context.condense`), until the request is near ``condense_to``. The
  system prompt, the task, the person's messages and answers (kept word for
  word) and the last ``keep_steps`` steps are never dropped.

Token counts are estimated from characters, at a ratio calibrated on each
reply's reported prompt tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from errand.errors import ConfigError
from errand.models import Message, Tool, ToolCall

__all__ = ["Context", "ContextPolicy", "render_for_summary"]

SUMMARY_HEADING = "Summary of the earlier steps of this run (condensed to fit the model's context window):"
PINNED_HEADING = "The person's messages and answers from those steps, word for word:"
#: Messages that carry the person's words; condensation keeps them verbatim.
PINNED_PREFIXES = ("Message from the person who gave you this task:", "The user answered:")
_DEFAULT_CHARS_PER_TOKEN = 3.0
_SUMMARY_ALLOWANCE = 3000  # characters a summary is assumed to take when planning a cut


@dataclass(frozen=True)
class ContextPolicy:
    """How the conversation is kept inside the window.

    ``shorten_over`` characters make an observation long; once used it keeps
    ``keep_chars`` (head and tail). Condensation starts when a request's estimate
    passes ``condense_at`` of the window less ``reply_reserve`` tokens for the
    reply, and cuts down to ``condense_to``; the last ``keep_steps`` steps stay.
    """

    keep_steps: int = 4
    shorten_over: int = 2000
    keep_chars: int = 1200
    condense_at: float = 0.75
    condense_to: float = 0.45
    reply_reserve: int = 4096

    def __post_init__(self) -> None:
        if not 0 < self.condense_to < self.condense_at <= 1:
            raise ConfigError("condense_to and condense_at must satisfy 0 < condense_to < condense_at <= 1",
                              code="invalid_budget")
        if self.keep_steps < 1 or self.keep_chars < 100 or self.shorten_over < self.keep_chars:
            raise ConfigError("keep_steps must be at least 1, keep_chars at least 100, shorten_over at least "
                              "keep_chars", code="invalid_budget")


@dataclass(frozen=True)
class Cut:
    """A planned condensation: the messages ``start:end`` of the trajectory go into the summary."""

    start: int
    end: int
    tokens_before: int
    tokens_after: int


class Context:
    """The state of one run's view: where the summary ends, the summary, what was pinned."""

    def __init__(self, window: int | None, policy: ContextPolicy | None = None) -> None:
        self.window = window
        self.policy = policy or ContextPolicy()
        self.cut = 0
        self.summary: str | None = None
        self.pinned: list[str] = []
        self.chars_per_token = _DEFAULT_CHARS_PER_TOKEN

    # ------------------------------------------------------------ the view

    def view(self, messages: Sequence[Message], *, cut: int | None = None, summary: str | None = None
             ) -> list[Message]:
        """What the model is sent of ``messages`` (with a planned ``cut`` and ``summary``, if given)."""
        head = _head_length(messages)
        cut = self.cut if cut is None else cut
        summary = self.summary if summary is None else summary
        body_start = max(cut, head)
        assistants = [i for i in range(body_start, len(messages)) if messages[i].role == "assistant"]
        used_before = assistants[-1] if assistants else body_start
        shown = [replace(m, cache=True) if i == head - 1 else m for i, m in enumerate(messages[:head])]
        if summary is not None:
            shown.append(Message("user", self._summary_text(summary)))
        stable_ends = {a - 1 for a in assistants[-2:] if a - 1 >= body_start}
        for index in range(body_start, len(messages)):
            message = messages[index]
            if index < used_before:
                message = self._shortened(message)
            shown.append(replace(message, cache=True) if index in stable_ends else message)
        return shown

    def _summary_text(self, summary: str) -> str:
        text = f"{SUMMARY_HEADING}\n{summary.strip()}"
        if self.pinned:
            text += f"\n\n{PINNED_HEADING}\n" + "\n".join(f"- {line}" for line in self.pinned)
        return text

    def _shortened(self, message: Message) -> Message:
        limit = self.policy.shorten_over
        if message.role == "tool" and len(message.content) > limit:
            return replace(message, content=shorten(message.content, self.policy.keep_chars))
        if message.tool_calls and any(_long_argument(c, limit) for c in message.tool_calls):
            calls = [_shortened_call(c, limit, self.policy.keep_chars) for c in message.tool_calls]
            return replace(message, tool_calls=calls)
        return message

    # ------------------------------------------------------------ sizes

    def tokens(self, view: Sequence[Message], tools: Sequence[Tool]) -> int:
        """The estimated prompt tokens of sending ``view`` with ``tools``."""
        return int(characters(view, tools) / self.chars_per_token)

    def calibrate(self, view: Sequence[Message], tools: Sequence[Tool], input_tokens: int) -> None:
        """Learn the ratio of characters to tokens from a reply's reported prompt tokens."""
        if input_tokens > 0:
            self.chars_per_token = min(max(characters(view, tools) / input_tokens, 1.0), 8.0)

    def budget(self) -> int | None:
        """Tokens a request may take before condensation, or ``None`` without a known window."""
        if self.window is None:
            return None
        reserve = min(self.policy.reply_reserve, self.window // 4)
        return int((self.window - reserve) * self.policy.condense_at)

    def refused(self, view: Sequence[Message], tools: Sequence[Tool], window: int | None) -> None:
        """The provider refused ``view`` as too long: believe it, and the window it named, if any."""
        sent = self.tokens(view, tools)
        # Without a window named, the one that refused is smaller than what was sent.
        learned = window if window is not None else int(sent * 0.9)
        self.window = min(self.window, learned) if self.window is not None else learned

    # ------------------------------------------------------------ condensing

    def plan(self, messages: Sequence[Message], tools: Sequence[Tool], *, forced: bool = False) -> Cut | None:
        """The cut that brings the view near ``condense_to``, if one is due (or ``forced``) and possible."""
        budget = self.budget()
        if budget is None:
            return None
        now = self.tokens(self.view(messages), tools)
        if not forced and now <= budget:
            return None
        start = max(self.cut, _head_length(messages))
        assistants = [i for i in range(start + 1, len(messages)) if messages[i].role == "assistant"]
        keep = self.policy.keep_steps if not forced else 1
        candidates = assistants[:len(assistants) - keep + 1] if len(assistants) >= keep else []
        target = int(budget / self.policy.condense_at * self.policy.condense_to)
        placeholder = "x" * _SUMMARY_ALLOWANCE
        chosen: Cut | None = None
        for end in candidates:
            after = self.tokens(self.view(messages, cut=end, summary=placeholder), tools)
            chosen = Cut(start, end, now, after)
            if after <= target:
                break
        return chosen

    def condense(self, messages: Sequence[Message], cut: Cut, summary: str) -> None:
        """Replace the messages ``cut.start:cut.end`` by ``summary`` in every later view."""
        self.pinned += [m.content for m in messages[cut.start:cut.end]
                        if m.role in ("user", "tool") and m.content.startswith(PINNED_PREFIXES)]
        self.cut = cut.end
        self.summary = summary


def render_for_summary(previous: str | None, messages: Sequence[Message], limit: int) -> str:
    """The steps to condense, as text for the summarizer, at most ``limit`` characters (the newest kept)."""
    for keep in (600, 200):
        lines = [f"Earlier summary:\n{previous}"] if previous else []
        lines += [_line(message, keep) for message in messages]
        text = "\n".join(lines)
        if len(text) <= limit:
            return text
    return "[the oldest of these steps are left out]\n" + text[-limit:]


def _line(message: Message, keep: int) -> str:
    if message.role == "tool":
        return f"result: {shorten(message.content, keep)}"
    if message.role == "assistant":
        calls = "; ".join(f"{c.name}({shorten(json.dumps(c.arguments), keep)})" for c in message.tool_calls)
        return f"assistant: {shorten(message.content, keep)}" + (f" [calls: {calls}]" if calls else "")
    return f"{message.role}: {shorten(message.content, keep)}"


def shorten(text: str, keep: int) -> str:
    """``text`` with its middle dropped so about ``keep`` characters remain (the end weighs more)."""
    if len(text) <= keep:
        return text
    head, tail = keep // 3, keep - keep // 3
    dropped = len(text) - head - tail
    return (f"{text[:head]}\n[... {dropped} characters of this output left out of the conversation once "
            f"used; run the call again to see them ...]\n{text[-tail:]}")


def characters(view: Sequence[Message], tools: Sequence[Tool]) -> int:
    size = sum(len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in tools)
    for message in view:
        size += len(message.content) + 16  # a turn's framing
        size += sum(len(c.name) + len(json.dumps(c.arguments)) + 16 for c in message.tool_calls)
    return size


def _head_length(messages: Sequence[Message]) -> int:
    """The system prompt and the task: up to and including the first user message."""
    for index, message in enumerate(messages):
        if message.role == "user":
            return index + 1
    return len(messages)


def _long_argument(call: ToolCall, limit: int) -> bool:
    return any(isinstance(v, str) and len(v) > limit for v in call.arguments.values())


def _shortened_call(call: ToolCall, limit: int, keep: int) -> ToolCall:
    arguments = {k: shorten(v, keep) if isinstance(v, str) and len(v) > limit else v
                 for k, v in call.arguments.items()}
    return replace(call, arguments=arguments)
