"""Runs that survive real models: the loop in a real sandbox, the real SDKs, loopback providers misbehaving.

The providers here are :mod:`models.provider_wire`'s: they speak each wire
protocol, enforce a context window with their own error body, answer 429s
with ``retry-after``, cut streams mid-tool-call and report cache usage. The
clock is a fake one, so a minute's ``retry-after`` takes no time.
"""

from __future__ import annotations

from typing import Any

import pytest

from errand.agent import Agent, AgentConfig, AgentHooks, Budgets
from errand.agent.retry import RetryPolicy
from errand.models import AnthropicModel, Model, OpenAIModel
from errand.models.profiles import ModelProfile, Pricing
from errand.sandbox import AsyncSandbox
from models.provider_wire import (
    Protocol,
    Provider,
    Turn,
    anthropic_error,
    openai_rate_limit,
    openai_server_error,
)
from models.wire import Hang, Recorded, Stream, WireServer

FINISH = ("finish", {"summary": "done", "assumptions": []})
PRICES = Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)


class FakeClock:
    """Time that passes only when the loop waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Events:
    def __init__(self) -> None:
        self.all: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, kind: str, data: dict[str, Any]) -> None:
        self.all.append((kind, data))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [data for k, data in self.all if k == kind]


def model_for(wire: WireServer, protocol: Protocol, *, streaming: bool = False, window: int | None = None) -> Model:
    profile = ModelProfile(window, PRICES)
    if protocol == "openai":
        return OpenAIModel("test-model", base_url=f"{wire.url}/v1", api_key="k", stream=streaming, profile=profile)
    return AnthropicModel("test-model", base_url=wire.url, api_key="k", stream=streaming, profile=profile,
                          max_tokens=1024)


def agent_for(model: Model, sandbox: AsyncSandbox, **options: Any) -> tuple[Agent, Events, FakeClock]:
    events, clock = Events(), FakeClock()
    config = AgentConfig(workdir="/workspace", **options)
    agent = Agent(model, sandbox, config, AgentHooks(on_event=events, clock=clock))
    return agent, events, clock


def script(*turns: Turn) -> Any:
    return lambda step: turns[step - 1] if step <= len(turns) else Turn(calls=[(f"f{step}", *FINISH)])


def results_sent(protocol: Protocol, request: Recorded) -> list[tuple[str, str]]:
    """The (call id, content) of each tool result in the request's last turn."""
    messages = request.body["messages"]
    if protocol == "openai":
        tail: list[dict[str, Any]] = []
        for message in reversed(messages):
            if message["role"] != "tool":
                break
            tail.insert(0, message)
        return [(m["tool_call_id"], m["content"]) for m in tail]
    return [(b["tool_use_id"], b["content"]) for b in messages[-1]["content"] if b["type"] == "tool_result"]


# ------------------------------------------------------------------ malformed and impossible calls


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_malformed_and_impossible_calls_are_answered_and_the_run_goes_on(
        wire: WireServer, sandbox: AsyncSandbox, protocol: Protocol) -> None:
    bad_json: Any = '{"path": "calc.py", "content": ' if protocol == "openai" else "not an object"
    provider = Provider(protocol, script(
        Turn(calls=[("c1", "rm_rf", {"path": "/"}), ("c2", "write_file", bad_json), ("c3", "shell", {}),
                    ("c4", "read_file", {"path": "calc.py", "start_line": "3"}),
                    ("c5", "shell", {"command": "echo ran", "cwd": "/"})]),
        Turn(calls=[("c6", "edit_file", {"path": "calc.py", "old": "return a - b", "new": "return a + b"})])),
        streaming=protocol == "anthropic")
    wire.respond(provider)
    agent, events, _ = agent_for(model_for(wire, protocol, streaming=protocol == "anthropic"), sandbox)
    result = await agent.run("fix add")

    assert result.status == "finished", result.detail
    answers = dict(results_sent(protocol, wire.requests[1]))
    assert list(answers) == ["c1", "c2", "c3", "c4", "c5"]
    assert answers["c1"].startswith("error: unknown tool 'rm_rf'; the tools are shell, read_file")
    assert answers["c2"].startswith("error: write_file: the call was not run: its ")
    assert "write_file takes a JSON object with path: string, content: string" in answers["c2"]
    assert answers["c3"].startswith("error: shell: missing required field 'command'")
    assert answers["c4"].startswith("error: read_file: field 'start_line' must be an integer, not a string")
    assert answers["c5"].startswith("error: shell: unknown field 'cwd'")
    assert [d.get("malformed", "")[:6] for d in events.of("tool_call")][:5] == ["error:"] * 5
    assert "return a + b" in await sandbox.files.read_text("/workspace/calc.py")  # the good call ran


async def test_only_malformed_replies_in_a_row_end_the_run_with_that_reason(
        wire: WireServer, sandbox: AsyncSandbox) -> None:
    provider = Provider("openai", lambda step: Turn(calls=[(f"c{step}", "run_command", {"command": "ls"})]))
    wire.respond(provider)
    agent, _, _ = agent_for(model_for(wire, "openai"), sandbox, budgets=Budgets(max_malformed=3))
    result = await agent.run("look around")
    assert result.status == "error" and provider.steps == 3
    assert result.detail.startswith("the model's last 3 replies held no tool call that could run; the last: "
                                    "error: unknown tool 'run_command'")


async def test_a_good_call_between_malformed_replies_resets_the_count(wire: WireServer, sandbox: AsyncSandbox) -> None:
    bad, good = Turn(calls=[("b", "nope", {})]), Turn(calls=[("g", "shell", {"command": "true"})])
    wire.respond(Provider("openai", script(bad, bad, good, bad, bad, Turn("just text"), bad)))
    agent, _, _ = agent_for(model_for(wire, "openai"), sandbox, budgets=Budgets(max_malformed=3))
    result = await agent.run("look around")
    assert result.status == "error"
    assert result.spent.steps == 6  # bad bad good | bad bad text: the text-only reply is the third in a row
    assert "the last: a reply with no tool call" in result.detail


# ------------------------------------------------------------------ provider failures


async def test_rate_limits_overload_and_5xx_are_retried_with_backoff_and_events(
        wire: WireServer, sandbox: AsyncSandbox) -> None:
    wire.queue(anthropic_error(429, "rate_limit_error", "rate limited", {"retry-after": "30"}))
    wire.queue(anthropic_error(529, "overloaded_error", "Overloaded"))
    wire.queue(anthropic_error(500, "api_error", "Internal server error"))
    wire.respond(Provider("anthropic", script(), streaming=True))
    agent, events, clock = agent_for(model_for(wire, "anthropic", streaming=True), sandbox)
    result = await agent.run("finish at once")

    assert result.status == "finished" and result.spent.retries == 3
    assert clock.slept == [30.0, 2.0, 4.0]  # the provider's retry-after, then doubling backoff
    retries = events.of("model_retry")
    assert [(r["retry"], r["status"], r["delay"]) for r in retries] == [(1, 429, 30.0), (2, 529, 2.0), (3, 500, 4.0)]
    assert "rate limited" in retries[0]["reason"]
    assert len(wire.requests) == 4


async def test_a_wait_past_the_time_budget_ends_the_run_without_waiting(
        wire: WireServer, sandbox: AsyncSandbox) -> None:
    wire.queue(openai_rate_limit("120"))
    agent, events, clock = agent_for(model_for(wire, "openai"), sandbox, budgets=Budgets(max_seconds=60))
    result = await agent.run("anything")
    assert result.status == "error" and clock.slept == [] and events.of("model_retry") == []
    assert "retry 1 would wait 120s, past the run's time budget (60.0s left)" in result.detail


async def test_retries_are_bounded(wire: WireServer, sandbox: AsyncSandbox) -> None:
    for _ in range(3):
        wire.queue(openai_server_error())
    agent, _, clock = agent_for(model_for(wire, "openai"), sandbox, retry=RetryPolicy(max_retries=2))
    result = await agent.run("anything")
    assert result.status == "error" and clock.slept == [1.0, 2.0] and len(wire.requests) == 3
    assert result.detail.startswith("the model failed 3 times in a row, the retries used up; the last time: "
                                    "openai:test-model answered HTTP 500")


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_a_request_that_times_out_is_retried(wire: WireServer, sandbox: AsyncSandbox, protocol: Protocol) -> None:
    wire.queue(Hang())
    wire.respond(Provider(protocol, script()))
    # The SDK's own timeout, real time: the loopback provider never answers the first request, and
    # answers the second at once, which on a saturated machine took longer than 0.3 s (a third try).
    model = (OpenAIModel("m", base_url=f"{wire.url}/v1", api_key="k", timeout=5) if protocol == "openai"
             else AnthropicModel("m", base_url=wire.url, api_key="k", timeout=5))
    agent, events, clock = agent_for(model, sandbox)
    result = await agent.run("finish at once")
    assert result.status == "finished" and len(wire.requests) == 2 and clock.slept == [1.0]
    assert "timed out" in events.of("model_retry")[0]["reason"].lower()


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_a_stream_cut_mid_tool_call_is_retried_and_never_run_half_parsed(
        wire: WireServer, sandbox: AsyncSandbox, protocol: Protocol) -> None:
    write = Turn(calls=[("w1", "write_file", {"path": "notes.txt", "content": "the whole note, " * 8})])
    provider = Provider(protocol, script(write), streaming=True)
    whole = provider.reply(write, provider.cache.usage([], 5)[1])
    assert isinstance(whole, Stream)
    middle = next(i for i, (_, data) in enumerate(whole.events) if "the whole note" in str(data)) + 1
    wire.queue(Stream(whole.events, cut_after=middle))
    wire.queue(Stream(whole.events[:middle]))  # and one that ends cleanly but early
    wire.respond(provider)
    agent, events, clock = agent_for(model_for(wire, protocol, streaming=True), sandbox)
    result = await agent.run("write the note")

    assert result.status == "finished", result.detail
    assert len(events.of("model_retry")) == 2 and clock.slept == [1.0, 2.0]
    writes = [d for d in events.of("tool_call") if d["name"] == "write_file"]
    assert len(writes) == 1 and writes[0]["arguments"]["content"] == "the whole note, " * 8
    assert await sandbox.files.read_text("/workspace/notes.txt") == "the whole note, " * 8


# ------------------------------------------------------------------ parallel calls


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_parallel_calls_run_in_order_and_each_result_goes_back(
        wire: WireServer, sandbox: AsyncSandbox, protocol: Protocol) -> None:
    wire.respond(Provider(protocol, script(Turn("three at once", [
        ("p1", "write_file", {"path": "order.txt", "content": "first\n"}),
        ("p2", "shell", {"command": "echo second >> order.txt; cat order.txt"}),
        ("p3", "read_file", {"path": "order.txt"})]))))
    agent, _, _ = agent_for(model_for(wire, protocol), sandbox)
    assert (await agent.run("write in order")).status == "finished"
    sent = results_sent(protocol, wire.requests[1])
    assert [call_id for call_id, _ in sent] == ["p1", "p2", "p3"]
    assert sent[1][1] == "exit code 0\nfirst\nsecond\n"
    assert sent[2][1].endswith("     1\tfirst\n     2\tsecond")


# ------------------------------------------------------------------ context and cost


def big_output(step: int) -> Turn:
    # About 12,000 characters of output a step: a 16k-token window holds four such steps at most.
    return Turn(calls=[(f"s{step}", "shell", {"command": f"seq {step} {step + 2400}"})])


def long_run(steps: int) -> Any:
    def play(step: int) -> Turn:
        if step < steps:
            return big_output(step)
        if step == steps:
            return Turn(calls=[("w", "write_file", {"path": "DONE", "content": f"{steps - 1} commands run\n"})])
        return Turn(calls=[("f", *FINISH)])
    return play


def task_and_last_result_kept(protocol: Protocol, task: str) -> Any:
    def check(request: Recorded) -> str | None:
        messages = request.body["messages"]
        first = messages[1]["content"] if protocol == "openai" else messages[0]["content"][0]["text"]
        if first != task:
            return "the task is not the first user message"
        last = results_sent(protocol, request)
        if len(messages) > 2 and not last:
            return "the last step's result is missing"
        if last and last[-1][1].startswith("exit code 0\n") and len(last[-1][1]) < 10_000:
            return "the last step's output was shortened before the model saw it"
        return None
    return check


async def test_a_context_overflow_the_model_did_not_announce_condenses_and_retries(
        wire: WireServer, sandbox: AsyncSandbox) -> None:
    task = "Run the commands, then write DONE."
    provider = Provider("openai", long_run(20), window=8_000, check=task_and_last_result_kept("openai", task))
    wire.respond(provider)
    agent, events, _ = agent_for(model_for(wire, "openai"), sandbox)  # errand does not know this window
    result = await agent.run(task)

    assert result.status == "finished", result.detail
    assert provider.refused >= 1 and provider.problems == []
    condensed = events.of("condensed")
    assert condensed[0]["forced"] and "maximum context length is 8000 tokens" in condensed[0]["reason"]
    assert condensed[0]["window"] == 8_000 and condensed[0]["dropped_steps"] >= 1
    assert condensed[0]["summary"] == provider.summary
    assert not any(c["forced"] for c in condensed[1:])  # once the window is known, errand condenses in time
    assert await sandbox.files.read_text("/workspace/DONE") == "19 commands run\n"


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
async def test_a_300_step_run_with_large_outputs_finishes_on_a_16k_window(
        wire: WireServer, sandbox: AsyncSandbox, protocol: Protocol) -> None:
    task = "Run each command and look at its output, then write DONE."
    provider = Provider(protocol, long_run(300), window=16_384, check=task_and_last_result_kept(protocol, task))
    wire.respond(provider)
    agent, events, _ = agent_for(model_for(wire, protocol, window=16_384), sandbox,
                                 budgets=Budgets(max_steps=400))
    result = await agent.run(task)

    assert result.status == "finished", result.detail
    assert result.spent.steps == 301 and await sandbox.files.read_text("/workspace/DONE") == "299 commands run\n"
    assert provider.refused == 0 and provider.problems == [] and provider.largest <= 16_384
    condensed = events.of("condensed")
    assert len(condensed) == provider.summaries >= 10 and not any(c["forced"] for c in condensed)
    assert all(c["tokens_after"] < c["tokens_before"] for c in condensed)
    assert len(result.messages) == 2 + 301 + 300  # the trajectory itself stays whole
    by_hand = sum(cost_by_hand(protocol, usage) for usage in provider.usages)
    assert result.spent.cost == pytest.approx(by_hand)
    assert result.spent.cache_read_tokens > result.spent.input_tokens / 3  # the stable prefix is cached


def cost_by_hand(protocol: Protocol, usage: dict[str, Any]) -> float:
    if protocol == "anthropic":
        return (usage["input_tokens"] * 3.0 + usage["cache_read_input_tokens"] * 0.3
                + usage["cache_creation_input_tokens"] * 3.75 + usage["output_tokens"] * 15.0) / 1e6
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    return ((usage["prompt_tokens"] - cached) * 3.0 + cached * 0.3 + usage["completion_tokens"] * 15.0) / 1e6


async def test_anthropic_requests_carry_cache_control_on_the_stable_prefix_and_cost_adds_up(
        wire: WireServer, sandbox: AsyncSandbox) -> None:
    provider = Provider("anthropic", long_run(8))
    wire.respond(provider)
    agent, events, _ = agent_for(model_for(wire, "anthropic", window=200_000), sandbox)
    result = await agent.run("Run the commands, then write DONE.")
    assert result.status == "finished", result.detail

    for request in wire.requests:
        body = request.body
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        marks = [(turn_index, block) for turn_index, turn in enumerate(body["messages"])
                 for block in turn["content"] if "cache_control" in block]
        assert len(marks) + 1 <= 4  # the API's limit, with the system prompt's mark
        assert marks[0] == (0, {"type": "text", "text": "Run the commands, then write DONE.",
                                "cache_control": {"type": "ephemeral"}})
        assistants = [i for i, turn in enumerate(body["messages"]) if turn["role"] == "assistant"]
        if len(assistants) >= 2:  # the end of the part that is sent again unchanged is marked
            assert (assistants[-1] - 1) in [turn_index for turn_index, _ in marks]
    by_hand = sum(cost_by_hand("anthropic", usage) for usage in provider.usages)
    assert result.spent.cost == pytest.approx(by_hand) and result.spent.cost > 0
    assert result.spent.cache_read_tokens > 0 and result.spent.cache_write_tokens > 0
    steps = events.of("model")
    assert sum(s["cost"] for s in steps) == pytest.approx(result.spent.cost)
    assert steps[-1]["run_cost"] == pytest.approx(result.spent.cost)
    assert {"cache_read_tokens", "cache_write_tokens", "run_tokens"} <= set(steps[0])
    assert events.of("exit")[0]["spent"]["cost"] == pytest.approx(result.spent.cost)
