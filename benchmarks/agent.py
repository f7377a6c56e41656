#!/usr/bin/env python3
"""errand agent benchmark: what a long run sends a model, with and without condensation and caching.

    .venv/bin/python benchmarks/agent.py [--steps 300] [--output-lines 2400] [--json PATH] [--quick]

One scripted run of ``--steps`` steps, each a shell command with a large output
(``seq`` of ``--output-lines`` lines, about 12,000 characters), then a file
written and ``finish``. The run goes through errand's real loop, a real
sandbox and the real ``anthropic`` SDK to a loopback Messages-API service
(``tests/models/provider_wire.py``) that counts each request's tokens (four
characters of its JSON to a token) and caches prompts the way Anthropic does:
at the request's ``cache_control`` breakpoints, prefixes of 1,024 tokens or
more. The model's moves do not depend on what it is shown, so every
configuration does the same work; only what is sent differs:

1. full history: every observation in full, no condensation;
2. shortened: observations kept short once used, no condensation;
3. shortened and condensed: as 2, on a 16k window, older steps summarised
   (the summaries' requests count too);

each without and with prompt caching. Cost is at claude-sonnet-4-5's prices
(errand's table: $3 input, $0.30 cache read, $3.75 cache write, $15 output per
million tokens). The script reports, it does not assert; it removes what it made.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from errand.agent import Agent, AgentConfig, Budgets
from errand.agent.context import ContextPolicy
from errand.models import AnthropicModel, profile_for
from errand.models.profiles import ModelProfile
from errand.sandbox import AsyncSandbox, Mount
from models.provider_wire import Provider, Turn
from models.wire import WireServer

MODEL = "claude-sonnet-4-5"
SMALL_WINDOW = 16_384
LARGE_WINDOW = 200_000  # the model's real window: what a request past it would meet


@dataclass(frozen=True)
class Setup:
    label: str
    shorten: bool
    window: int | None
    cache: bool


SETUPS = [
    Setup("full history", shorten=False, window=None, cache=False),
    Setup("full history, cached", shorten=False, window=None, cache=True),
    Setup("shortened", shorten=True, window=None, cache=False),
    Setup("shortened, cached", shorten=True, window=None, cache=True),
    Setup("shortened + condensed (16k)", shorten=True, window=SMALL_WINDOW, cache=False),
    Setup("shortened + condensed (16k), cached", shorten=True, window=SMALL_WINDOW, cache=True),
]


def play(steps: int, lines: int) -> Any:
    def turn(step: int) -> Turn:
        if step < steps:
            return Turn(calls=[(f"s{step}", "shell", {"command": f"seq {step} {step + lines - 1}"})])
        if step == steps:
            return Turn(calls=[("w", "write_file", {"path": "DONE", "content": "done\n"})])
        return Turn(calls=[("f", "finish", {"summary": "ran the commands", "assumptions": []})])
    return turn


async def one_run(setup: Setup, steps: int, lines: int, workspace: Path) -> dict[str, Any]:
    provider = Provider("anthropic", play(steps, lines), window=setup.window)
    wire = WireServer().start()
    wire.respond(provider)
    table = profile_for(MODEL)
    model = AnthropicModel(MODEL, base_url=wire.url, api_key="bench", max_tokens=1024, cache=setup.cache,
                           profile=ModelProfile(setup.window, table.pricing))
    policy = ContextPolicy() if setup.shorten else ContextPolicy(shorten_over=10**9)
    sandbox = await AsyncSandbox.create(mounts=[Mount.copy(workspace, "/workspace")], workdir="/workspace",
                                        timeout=600)
    started = time.perf_counter()
    try:
        agent = Agent(model, sandbox, AgentConfig(workdir="/workspace", budgets=Budgets(max_steps=steps + 10),
                                                  context=policy))
        result = await agent.run("Run each command and look at its output, then write DONE.")
    finally:
        await sandbox.terminate()
        await model.aclose()
        wire.stop()
    usages = provider.usages
    sizes = [u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] for u in usages]
    return {
        "setup": setup.label, "status": result.status, "steps": result.spent.steps, "requests": len(usages),
        "summaries": provider.summaries, "prompt_tokens": sum(sizes),
        "uncached_tokens": sum(u["input_tokens"] for u in usages),
        "cache_read_tokens": sum(u["cache_read_input_tokens"] for u in usages),
        "cache_write_tokens": sum(u["cache_creation_input_tokens"] for u in usages),
        "output_tokens": sum(u["output_tokens"] for u in usages), "largest_request": max(sizes),
        "requests_past_200k": sum(1 for size in sizes if size > LARGE_WINDOW),
        "cost": result.spent.cost, "seconds": round(time.perf_counter() - started, 1),
    }


async def bench(steps: int, lines: int, work: Path) -> list[dict[str, Any]]:
    workspace = work / "workspace"
    workspace.mkdir()
    (workspace / "README.md").write_text("A workspace for the agent benchmark.\n")
    rows = []
    for setup in SETUPS:
        rows.append(await one_run(setup, steps, lines, workspace))
        print(f"  {setup.label}: {rows[-1]['seconds']} s", file=sys.stderr)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--output-lines", type=int, default=2400)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true", help="a run of seconds: 3 steps of 100-line outputs")
    options = parser.parse_args()
    if options.quick:
        options.steps, options.output_lines = 3, 100
    work = Path(tempfile.mkdtemp(prefix="errand-bench-agent-"))
    os.environ["ERRAND_HOME"] = str(work / "home")
    try:
        rows = asyncio.run(bench(options.steps, options.output_lines, work))
    except KeyboardInterrupt:
        return 130
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nerrand agent benchmark: {options.steps} steps of ~{options.output_lines}-line outputs, {MODEL} prices")
    print(f"{'setup':38} {'status':>8} {'requests':>8} {'prompt tokens':>14} {'uncached':>12} {'cache read':>12} "
          f"{'cache write':>12} {'largest':>9} {'>200k':>6} {'cost $':>9}")
    for row in rows:
        print(f"{row['setup']:38} {row['status']:>8} {row['requests']:>8} {row['prompt_tokens']:>14,} "
              f"{row['uncached_tokens']:>12,} {row['cache_read_tokens']:>12,} {row['cache_write_tokens']:>12,} "
              f"{row['largest_request']:>9,} {row['requests_past_200k']:>6} {row['cost']:>9.2f}")
    if options.json:
        options.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
