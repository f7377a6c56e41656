#!/usr/bin/env python3
"""Each agent CLI's cold start, and what the model gateway adds to its model calls, against calling direct.

    .venv/bin/python benchmarks/agents.py [--calls N] [--runs N] [--agents KIND,...] [--json PATH] [--quick]

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

**Cold start, per agent.** For every agent CLI errand runs (each adapter of
``errand.agent.seam.ADAPTERS``, so a new adapter is measured without a change
here), its image layer is built first (or found cached; not timed); then each
run is timed from ``AsyncSandbox.create`` of the base image with that layer on
top, as a task's round creates it (the working copy of a small project bound
at /workspace, no network but the gateway's relay), through writing the CLI's
configuration files and starting it as the round does, to the moment its first
model request (a generating route: messages, chat completions, responses,
generateContent) reaches the wire server behind the gateway. The wire server
then never answers, and the sandbox is ended. p50 over ``--runs`` runs (3 by
default). A CLI that exits before its first model request, or makes none within
``WAIT_SECONDS``, is a failed start: its reason (the end of what it printed) is
shown and the benchmark exits 1, so a harness that stopped fitting a CLI fails
CI instead of printing a dash. ``--quick`` measures one run of one agent
(``QUICK_AGENT``, unless ``--agents`` names others: codex, whose layer is one
native binary, the quickest to build; the suite runs it on the worker that runs
codex's own tests, which share the layer).
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


# ---------------------------------------------------------------- cold start of each agent CLI

#: The wire paths of a model request (a generating call), as each protocol's upstream sees them.
GENERATING = ("/v1/messages", "/chat/completions", "/responses", "generatecontent")
WAIT_SECONDS = 300  # for a CLI's first model request before its start is counted as failed
QUICK_AGENT = "codex"  # the agent --quick starts (tests/test_benchmarks.py groups it with codex's tests)
CALC = "def add(a, b):\n    return a - b\n"
TEST_CALC = "from calc import add\n\nassert add(2, 3) == 5\n"


class _NoStart(Exception):
    """A CLI's start that made no model request: it exited first, or made none in time."""


def _project(root: Path) -> Path:
    """A small repository the sandbox's user owns, as a round's working copy is (aider writes its git
    config at start)."""
    import subprocess

    from errand import _settings

    root.mkdir(parents=True)
    (root / "calc.py").write_text(CALC)
    (root / "test_calc.py").write_text(TEST_CALC)
    for command in (["init", "-q", "-b", "main"], ["add", "-A"],
                    ["-c", "user.name=bench", "-c", "user.email=bench@example.com", "commit", "-q", "-m", "start"]):
        subprocess.run(["git", *command], cwd=root, check=True, capture_output=True)
    uid = _settings.sandbox_uid()
    subprocess.run(["chown", "-R", "-h", f"{uid}:{uid}", str(root)], check=True)
    return root


class _FirstModelRequest:
    """The wire server's responder: notes when the first model request arrives, and never answers it."""

    def __init__(self) -> None:
        import threading

        self.seen = threading.Event()
        self.at = 0.0

    def __call__(self, request: Any) -> Any:
        from models.wire import Hang, Json

        path = request.path.lower()
        if any(part in path for part in GENERATING) and "count_tokens" not in path:
            if not self.seen.is_set():
                self.at = time.perf_counter()
                self.seen.set()
            return Hang()
        return Json({})


async def _layered(kind: str) -> Any:
    """The base image with agent ``kind``'s layer on top (built first if it is not cached)."""
    from errand.agent.external import with_layer
    from errand.agent.seam import cli_adapter
    from errand.sandbox import Image

    adapter = cli_adapter(kind, workdir="/workspace")
    return await with_layer(Image.base(), adapter)


async def _cold_start(kind: str, image: Any, gateway: Any, wire: Any, project: Path, run: int) -> float:
    """One timed cold start of agent ``kind``: sandbox create → its first model request at the wire
    (ms); :class:`_NoStart` if it exited first or made none within WAIT_SECONDS."""
    from errand.agent.external import ModelAccess
    from errand.agent.seam import cli_adapter
    from errand.gateway import Upstream
    from errand.sandbox import GATEWAY_URL, AsyncSandbox, Mount, Network

    adapter = cli_adapter(kind, workdir="/workspace")
    base = wire.url + ("/v1" if adapter.protocol.startswith("openai") else "")
    grant = await gateway.grant(f"cold-{kind}-{run}", Upstream(adapter.protocol, base, KEY))  # type: ignore[arg-type]
    host, port = gateway.address
    access = ModelAccess(grant.url_at(GATEWAY_URL), grant.token, "test-model", relay=f"{host}:{port}")
    first = _FirstModelRequest()
    wire.respond(first)
    started = time.perf_counter()
    sandbox = await AsyncSandbox.create(image, mounts=[Mount.bind(str(project), "/workspace", read_only=False)],
                                        network=Network.none(), timeout=None, workdir="/workspace",
                                        env={"CI": "1"}, gateway=access.relay)
    try:
        system = "You are errand's agent. Make the failing test pass."
        for path, text in adapter.files(access, system).items():
            await sandbox.files.write(path, text, mode=0o600)
        process = await sandbox.exec(*adapter.argv("Make test_calc.py pass.", system, access, None),
                                     cwd="/workspace", env=adapter.env(access))
        await process.stdin.close()
        import asyncio

        said: list[str] = []

        async def drain(stream: Any) -> None:
            async for line in stream:
                said.append(line)
                del said[:-20]

        drains = [asyncio.ensure_future(drain(stream)) for stream in (process.stdout, process.stderr)]
        exited = asyncio.ensure_future(process.wait())
        try:
            deadline = time.monotonic() + WAIT_SECONDS
            # The wire server's thread notes the request's time; this loop only looks for it (or an exit).
            while not first.seen.is_set() and not exited.done() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            if first.seen.is_set():
                return (first.at - started) * 1000
            if exited.done():
                await asyncio.wait(drains, timeout=5)
                tail = " / ".join(line.strip() for line in said[-3:])
                raise _NoStart(f"exited with {exited.result()} before its first model request: {tail}")
            raise _NoStart(f"made no model request in {WAIT_SECONDS} s")
        finally:
            for waiting in (exited, *drains):
                waiting.cancel()
            await asyncio.gather(exited, *drains, return_exceptions=True)
    finally:
        await sandbox.terminate()
        await gateway.revoke(grant)


async def cold_starts(kinds: list[str], runs: int) -> dict[str, list[float | str]]:
    """Each agent's cold starts (ms, or why it made no model request), its layer built (or found
    cached) before the first."""
    from errand.gateway import Gateway
    from models.wire import WireServer

    images = {kind: await _layered(kind) for kind in kinds}
    samples: dict[str, list[float | str]] = {}
    wire = WireServer().start()
    try:
        with tempfile.TemporaryDirectory(prefix="errand-bench-cold-") as scratch:
            async with Gateway(Path(scratch) / "transcripts") as gateway:
                for kind, image in images.items():
                    for run in range(runs):
                        project = _project(Path(scratch) / f"{kind}-{run}")
                        try:
                            sample: float | str = await _cold_start(kind, image, gateway, wire, project, run)
                        except _NoStart as error:
                            sample = str(error)
                        samples.setdefault(kind, []).append(sample)
    finally:
        wire.stop()
    return samples


def render_cold(samples: dict[str, list[float | str]]) -> str:
    from errand.agent.seam import cli_adapter

    lines = ["| agent (package) | runs | cold start p50 | min / max |", "|---|---|---|---|"]
    for kind, runs in samples.items():
        package = cli_adapter(kind, workdir="/workspace").package
        times = [time for time in runs if isinstance(time, float)]
        failed = f"; {len(runs) - len(times)} failed" if len(times) < len(runs) else ""
        figures = f"{statistics.median(times):.0f} ms | {min(times):.0f} / {max(times):.0f} ms" if times else "– | –"
        lines.append(f"| {kind} ({package}) | {len(runs)}{failed} | {figures} |")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    import asyncio

    from errand.agent.seam import EXTERNAL_KINDS

    kinds = args.agents.split(",") if args.agents else [QUICK_AGENT] if args.quick else list(EXTERNAL_KINDS)
    unknown = sorted(set(kinds) - set(EXTERNAL_KINDS))
    if unknown:
        raise SystemExit(f"unknown agents {unknown}: the agent CLIs are {', '.join(EXTERNAL_KINDS)}")
    cold = asyncio.run(cold_starts(kinds, args.runs))
    print("Each agent CLI's cold start, its image layer cached: sandbox create → its first model request "
          f"at the wire server, through the gateway\n\n{render_cold(cold)}\n")
    samples = latencies(args)
    if args.json:
        Path(args.json).write_text(json.dumps({"gateway": samples, "cold_start": cold}))
    failures = [f"{kind} {reason}" for kind, runs in cold.items() for reason in runs if isinstance(reason, str)]
    for failure in failures:
        print(f"FAILED START: {failure}", file=sys.stderr)
    return 1 if failures else 0


def latencies(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
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
    return samples


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500, help="timed calls per path and kind (default 500)")
    parser.add_argument("--warmups", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3, help="cold starts per agent (default 3)")
    parser.add_argument("--agents", help="the agent CLIs to start, comma-separated (default: every one)")
    parser.add_argument("--json", help="write the samples (ms) here")
    parser.add_argument("--quick", action="store_true",
                        help=f"50 calls each, one cold start of one agent ({QUICK_AGENT} unless --agents names others)")
    options = parser.parse_args()
    if options.quick:
        options.calls, options.warmups, options.runs = 50, 5, 1
    sys.exit(main(options))
