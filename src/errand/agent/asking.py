"""Asking the model: inside its context window, and through the provider's failures.

:meth:`Asker.ask` sends the :class:`~errand.agent.context.Context` view of the
trajectory. A retryable failure (rate limit, overload, 5xx, a dropped
connection or cut stream, a timeout) is retried after the wait the
:class:`~errand.agent.retry.RetryPolicy` gives, each retry a ``model_retry``
event; a request the provider refuses as too long condenses the conversation
and is sent again. Condensing (proactive, before a request near the window, or
after such a refusal) asks the model for a summary of the dropped steps and
records a ``condensed`` event saying what was dropped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from errand.agent.budgets import Spent
from errand.agent.context import Context, Cut, render_for_summary
from errand.agent.exits import RunFailed
from errand.agent.retry import Clock, RetryPolicy
from errand.models import Message, Model, ModelError, Reply, Tool
from errand.models.errors import CONTEXT_LENGTH_EXCEEDED

__all__ = ["Asker"]

Emit = Callable[[str, dict[str, Any]], Awaitable[None]]

MAX_REFUSALS = 3  # "too long" answers in a row for one step before the run gives up

_SUMMARIZER = """\
You condense the earlier steps of a coding agent's run into notes the agent continues from; the steps
themselves will be dropped from its conversation. Keep what it still needs: files read and changed (paths
and what changed), commands run and their outcomes (tests passing or failing, the key lines of errors),
facts learned about the code, decisions made and why, and what remained to do. Leave out raw output that
no longer matters. Write plain text, at most 400 words; do not call tools."""


class Asker:
    """Asks ``model`` for the next reply to a trajectory, keeping within ``context`` and the time left."""

    def __init__(self, model: Model, context: Context, retry: RetryPolicy, clock: Clock, emit: Emit,
                 spent: Spent, seconds_left: Callable[[], float | None]) -> None:
        self.model = model
        self.context = context
        self.retry = retry
        self.clock = clock
        self._emit = emit
        self._spent = spent
        self._seconds_left = seconds_left

    async def ask(self, messages: Sequence[Message], tools: Sequence[Tool]) -> Reply:
        """The model's reply to the view of ``messages``; raises :class:`RunFailed` when it cannot be had."""
        await self.keep_in_window(messages, tools)
        for _refusal in range(MAX_REFUSALS):
            view = self.context.view(messages)
            try:
                reply = await self._retrying(view, tools)
            except ModelError as error:
                if error.code != CONTEXT_LENGTH_EXCEEDED:
                    raise RunFailed(f"the model failed: {error.message}") from error
                self.context.refused(view, tools, error.context_window)
                if not await self._condense(messages, tools, forced=True, reason=error.message):
                    raise RunFailed(f"the conversation no longer fits the model's context window and nothing "
                                    f"more can be condensed: {error.message}") from error
                continue
            self.context.calibrate(view, tools, reply.usage.input_tokens)
            return reply
        raise RunFailed(f"the model refused the conversation as too long {MAX_REFUSALS} times in a row, "
                        "condensed each time")

    async def keep_in_window(self, messages: Sequence[Message], tools: Sequence[Tool]) -> None:
        """Condense before a request that would pass the window's budget."""
        await self._condense(messages, tools, forced=False, reason="near the context window")

    # ------------------------------------------------------------ condensing

    async def _condense(self, messages: Sequence[Message], tools: Sequence[Tool], *, forced: bool,
                        reason: str) -> bool:
        cut = self.context.plan(messages, tools, forced=forced)
        if cut is None:
            return False
        summary, usage_data = await self._summary(messages, cut)
        self.context.condense(messages, cut, summary)
        self._spent.condensations += 1
        after = self.context.tokens(self.context.view(messages), tools)
        await self._emit("condensed", {
            "reason": reason, "forced": forced, "dropped_messages": cut.end - cut.start,
            "dropped_steps": sum(1 for m in messages[cut.start:cut.end] if m.role == "assistant"),
            "first_message": cut.start, "last_message": cut.end - 1, "tokens_before": cut.tokens_before,
            "tokens_after": after, "window": self.context.window, "summary": summary, **usage_data})
        return True

    async def _summary(self, messages: Sequence[Message], cut: Cut) -> tuple[str, dict[str, Any]]:
        """The model's summary of the steps ``cut`` drops (or a plain list of them if it fails)."""
        window = self.context.window or 0
        limit = int(window * 0.5 * self.context.chars_per_token)
        steps = render_for_summary(self.context.summary, messages[cut.start:cut.end], limit)
        prompt = [Message("system", _SUMMARIZER), Message("user", f"<steps>\n{steps}\n</steps>\nWrite the notes.")]
        try:
            reply = await self._retrying(prompt, [])
        except ModelError as error:
            return _plain_summary(self.context.summary, messages[cut.start:cut.end]), {
                "summary_failed": error.message}
        self._spent.add(reply.usage, reply.cost)
        text = reply.message.content.strip() or _plain_summary(self.context.summary, messages[cut.start:cut.end])
        return text, {"input_tokens": reply.usage.input_tokens, "output_tokens": reply.usage.output_tokens,
                      "cost": reply.cost}

    # ------------------------------------------------------------ retrying

    async def _retrying(self, messages: Sequence[Message], tools: Sequence[Tool]) -> Reply:
        """The reply, retrying what is worth it; a final failure is raised as it came."""
        retry = 0
        while True:
            try:
                return await self.model.complete(messages, tools)
            except ModelError as error:
                if not error.retryable:
                    raise
                retry += 1
                if retry > self.retry.max_retries:
                    raise RunFailed(f"the model failed {retry} times in a row, the retries used up; the last "
                                    f"time: {error.message}") from error
                await self._wait(error, retry)

    async def _wait(self, error: ModelError, retry: int) -> None:
        delay = self.retry.delay(retry, error.retry_after)
        left = self._seconds_left()
        if left is not None and delay >= left:
            raise RunFailed(f"the model failed and retry {retry} would wait {delay:g}s, past the run's time "
                            f"budget ({left:.1f}s left): {error.message}") from error
        self._spent.retries += 1
        await self._emit("model_retry", {
            "retry": retry, "max_retries": self.retry.max_retries, "delay": delay, "reason": error.message,
            "status": error.status, "code": error.code, "retry_after": error.retry_after})
        await self.clock.sleep(delay)


def _plain_summary(previous: str | None, dropped: Sequence[Message]) -> str:
    calls = [f"{c.name}({', '.join(f'{k}={str(v)[:60]!r}' for k, v in c.arguments.items())})"
             for m in dropped for c in m.tool_calls]
    text = f"{previous}\n" if previous else ""
    return text + "Tool calls made (their results were dropped): " + "; ".join(calls)
