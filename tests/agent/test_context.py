"""What the model is shown of a long trajectory: shortened once used, condensed near the window."""

from __future__ import annotations

import pytest

from errand.agent.context import PINNED_HEADING, SUMMARY_HEADING, Context, ContextPolicy
from errand.agent.retry import RetryPolicy
from errand.errors import ConfigError
from errand.models import Message, ToolCall

BIG = "line of output\n" * 800  # 12,000 characters


def trajectory(steps: int, *, person_at: int | None = None) -> list[Message]:
    messages = [Message("system", "You are a coding agent."), Message("user", "the task")]
    for step in range(1, steps + 1):
        messages.append(Message("assistant", "", [ToolCall(f"c{step}", "shell", {"command": f"seq {step}"})]))
        messages.append(Message("tool", f"step {step}\n{BIG}", tool_call_id=f"c{step}"))
        if step == person_at:
            messages.append(Message("user", "Message from the person who gave you this task: keep double()"))
    return messages


def test_an_observation_is_whole_once_then_short_and_the_same_in_every_later_view() -> None:
    context = Context(None)
    messages = trajectory(3)
    view = context.view(messages)
    assert view[-1].content == messages[-1].content  # the newest result: not yet used
    assert len(view[-3].content) < 1400 and "left out of the conversation once used" in view[-3].content
    assert view[-3].content.startswith("step 2\n")
    later = context.view(trajectory(5))
    assert [m.content for m in later[:len(view) - 1]] == [m.content for m in view[:-1]]  # a stable prefix


def test_the_cache_marks_fall_on_the_task_and_the_ends_of_the_stable_part() -> None:
    view = Context(None).view(trajectory(4))
    marked = [index for index, message in enumerate(view) if message.cache]
    # the task (1), and the results just before the last two assistant turns (5 and 7)
    assert marked == [1, 5, 7]


def test_condensing_keeps_the_head_the_last_steps_and_the_persons_words() -> None:
    context = Context(16_384, ContextPolicy(keep_steps=3))
    messages = trajectory(20, person_at=2)
    cut = context.plan(messages, [])
    assert cut is not None and cut.start == 2 and messages[cut.end].role == "assistant"
    context.condense(messages, cut, "ran seq a few times")
    view = context.view(messages)
    assert [m.content for m in view[:2]] == ["You are a coding agent.", "the task"]
    assert view[2].content.startswith(f"{SUMMARY_HEADING}\nran seq a few times\n\n{PINNED_HEADING}\n- Message from")
    assert [m.role for m in view[3:5]] == ["assistant", "tool"]  # a cut never parts a call from its result
    assert sum(1 for m in view if m.role == "assistant") >= 3
    assert context.tokens(view, []) < cut.tokens_before
    assert view[-1] == messages[-1]


def test_nothing_is_condensed_under_the_budget_or_without_a_window() -> None:
    assert Context(200_000).plan(trajectory(5), []) is None
    assert Context(None).plan(trajectory(50), []) is None
    context = Context(None)
    context.refused(context.view(trajectory(6)), [], 8_000)  # the provider named its window
    assert context.window == 8_000 and context.plan(trajectory(6), [], forced=True) is not None


def test_policies_refuse_nonsense() -> None:
    with pytest.raises(ConfigError):
        ContextPolicy(condense_to=0.9, condense_at=0.5)
    with pytest.raises(ConfigError):
        ContextPolicy(keep_steps=0)
    with pytest.raises(ConfigError):
        RetryPolicy(max_retries=-1)
