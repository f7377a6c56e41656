#!/usr/bin/env python3
"""What the model gateway adds to an agent CLI's model call, against calling the provider direct.

    .venv/bin/python benchmarks/agents.py [--calls N] [--json PATH] [--quick]

Three processes on loopback, each with its own interpreter: a wire server
(``tests/models/wire.py``) answering as Anthropic's Messages API and OpenAI's
chat completions do, whole and streamed (a 12-event stream), to a short request
and to a long run's (200 turns of history, ~330 KB of JSON); the gateway
(``errand.gateway``) with one grant per protocol; and the client, which makes
the same request alternately **direct** to the wire server (with the key) and
**through the gateway** (with the grant's token), so drift hits both alike.

A call is timed from sending the request until the last byte of the reply has
been read. The wire server closes each connection after its reply (HTTP/1.0),
so both paths pay one connection to it per call; the client keeps its own
connection to the gateway open, as an SDK does. The added latency (gateway p50
minus direct p50) is printed beside the goal: ≤ 2 ms p50. It reports, it does
not assert: it exits 0 whatever the figures are.

The per-agent cold start (each CLI's image layer cached) joins this table with
the agent adapters.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

GOAL_MS = 2.0
KEY = "sk-benchmark-upstream-key"
PROMPT = [{"role": "user", "content": "Fix the failing test in tests/test_dates.py. " * 20}]
# A long run's request: 200 turns of history, ~330 KB of JSON, as an agent CLI sends late in a task.
HISTORY = [{"role": "user" if turn % 2 == 0 else "assistant", "content": "$ pytest -q tests/test_dates.py\n" * 50}
           for turn in range(200)]
KINDS = [("anthropic", False, False), ("anthropic", True, False), ("openai-chat", False, False),
         ("openai-chat", True, False), ("anthropic", True, True)]


def _answer(request: Any) -> Any:
    """The wire's reply to any request: a whole message or a stream, by the request's ``stream``."""
    from models.provider_wire import (
        Turn,
        anthropic_events,
        anthropic_message,
        anthropic_usage,
        openai_chunks,
        openai_completion,
        openai_usage,
    )
    from models.wire import Json, Stream

    turn = Turn("I changed the date parser to accept ISO week dates; the test passes now.")
    streamed = bool(request.body.get("stream"))
    if request.path.endswith("/messages"):
        usage = anthropic_usage(900, 40)
        if streamed:
            return Stream(anthropic_events(turn, usage))
        return Json(anthropic_message(turn, usage))
    usage = openai_usage(900, 40)
    return Stream(openai_chunks(turn, usage)) if streamed else Json(openai_completion(turn, usage))


def _serve_wire(ready: Any, stop: Any) -> None:
    from models.wire import WireServer

    wire = WireServer()
    wire.respond(_answer)
    wire.start()
    ready.send(wire.url)
    stop.recv()
    wire.stop()


def _serve_gateway(wire_url: str, transcripts: str, ready: Any, stop: Any) -> None:
    import asyncio

    from errand.gateway import Gateway, Upstream

    async def serve() -> None:
        async with Gateway(Path(transcripts)) as gateway:
            grants = {}
            for protocol in ("anthropic", "openai-chat"):
                base = wire_url if protocol == "anthropic" else wire_url + "/v1"
                grants[protocol] = await gateway.grant(f"bench-{protocol}",
                                                       Upstream(protocol, base, KEY))  # type: ignore[arg-type]
            ready.send({protocol: {"base_url": grant.base_url, "token": grant.token}
                        for protocol, grant in grants.items()})
            await asyncio.get_running_loop().run_in_executor(None, stop.recv)
            ready.send({protocol: len(grant.calls) for protocol, grant in grants.items()})

    asyncio.run(serve())


def _request(protocol: str, streamed: bool, base_url: str, credential: str,
             messages: list[dict[str, str]] = PROMPT) -> tuple[str, dict[str, str], bytes]:
    if protocol == "anthropic":
        body = {"model": "claude-sonnet-4-5", "max_tokens": 200, "messages": messages, "stream": streamed}
        headers = {"x-api-key": credential, "anthropic-version": "2023-06-01", "content-type": "application/json"}
        return base_url + "/v1/messages", headers, json.dumps(body).encode()
    body = {"model": "gpt-4.1", "messages": messages, "stream": streamed}
    if streamed:
        body["stream_options"] = {"include_usage": True}
    headers = {"authorization": f"Bearer {credential}", "content-type": "application/json"}
    return base_url + "/chat/completions", headers, json.dumps(body).encode()


def _timed(client: Any, url: str, headers: dict[str, str], body: bytes) -> float:
    started = time.perf_counter()
    with client.stream("POST", url, headers=headers, content=body) as response:
        for _ in response.iter_raw():
            pass
        if response.status_code != 200:
            raise SystemExit(f"{url} answered {response.status_code}")
    return time.perf_counter() - started


def measure(wire_url: str, grants: dict[str, dict[str, str]], calls: int, warmups: int) -> dict[str, Any]:
    import httpx

    samples: dict[str, dict[str, list[float]]] = {}
    with httpx.Client(trust_env=False, timeout=60) as client:
        for protocol, streamed, long in KINDS:
            name = f"{protocol}, {'streamed' if streamed else 'whole'}{', a 330 KB request' if long else ''}"
            messages = HISTORY if long else PROMPT
            direct_base = wire_url if protocol == "anthropic" else wire_url + "/v1"
            direct = _request(protocol, streamed, direct_base, KEY, messages)
            through = _request(protocol, streamed, grants[protocol]["base_url"], grants[protocol]["token"], messages)
            times: dict[str, list[float]] = {"direct": [], "gateway": []}
            for index in range(warmups + calls):
                pair = [("direct", direct), ("gateway", through)]
                for label, (url, headers, body) in pair if index % 2 == 0 else reversed(pair):
                    elapsed = _timed(client, url, headers, body)
                    if index >= warmups:
                        times[label].append(elapsed * 1000)
            samples[name] = times
    return samples


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def render(samples: dict[str, dict[str, list[float]]]) -> str:
    lines = ["| call | direct p50 / p95 | through the gateway p50 / p95 | added p50 | goal ≤ 2 ms |",
             "|---|---|---|---|---|"]
    for name, times in samples.items():
        direct, through = times["direct"], times["gateway"]
        added = statistics.median(through) - statistics.median(direct)
        lines.append(f"| {name} | {_p(direct, .5):.2f} / {_p(direct, .95):.2f} ms | "
                     f"{_p(through, .5):.2f} / {_p(through, .95):.2f} ms | {added:+.2f} ms | "
                     f"{'met' if added <= GOAL_MS else 'not met'} |")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    context = multiprocessing.get_context("spawn")
    wire_ready, wire_ready_child = context.Pipe()
    wire_stop_child, wire_stop = context.Pipe()
    gateway_ready, gateway_ready_child = context.Pipe()
    gateway_stop_child, gateway_stop = context.Pipe()
    with tempfile.TemporaryDirectory(prefix="errand-bench-gateway-") as transcripts:
        wire = context.Process(target=_serve_wire, args=(wire_ready_child, wire_stop_child), daemon=True)
        wire.start()
        wire_url = wire_ready.recv()
        gateway = context.Process(target=_serve_gateway, args=(wire_url, transcripts, gateway_ready_child,
                                                               gateway_stop_child), daemon=True)
        gateway.start()
        grants = gateway_ready.recv()
        try:
            samples = measure(wire_url, grants, args.calls, args.warmups)
        finally:
            gateway_stop.send("stop")
            metered = gateway_ready.recv() if gateway_ready.poll(30) else {}
            wire_stop.send("stop")
            gateway.join(30)
            wire.join(30)
        kept = sum(len(path.read_text().splitlines()) for path in Path(transcripts).glob("*.jsonl"))
    print(f"The gateway's added latency per call on loopback ({args.calls} calls each, after {args.warmups} "
          "warm-ups; direct and gateway alternating)\n")
    print(render(samples))
    print(f"\ncalls metered by the gateway: {metered}; transcript lines written: {kept}")
    print(f"machine: {platform.node()}, {os.cpu_count()} cpus, Linux {platform.release()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(samples))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500, help="timed calls per path and kind (default 500)")
    parser.add_argument("--warmups", type=int, default=20)
    parser.add_argument("--json", help="write the samples (ms) here")
    parser.add_argument("--quick", action="store_true", help="a run of seconds: 50 calls each")
    options = parser.parse_args()
    if options.quick:
        options.calls, options.warmups = 50, 5
    sys.exit(main(options))
