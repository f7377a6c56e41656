#!/usr/bin/env python3
"""errand server benchmarks: API latency under steady load, and live events at scale.

    .venv/bin/python benchmarks/server.py [--rate 200] [--seconds 10] [--watchers 500] [--events 400] [--quick]

An ``errand serve --no-engine`` runs in its own process over a store of 500 tasks; this
process is the load, on loopback:

1. **list and show at a fixed rate.** An open-loop schedule sends ``--rate`` requests a
   second for ``--seconds`` (half ``GET /api/tasks?limit=50``, half ``GET /api/tasks/{id}``),
   on a schedule that does not wait for answers (no coordinated omission: a late answer
   is timed from when its request was due). Target: p99 ≤ 50 ms at 200 requests/s.
2. **500 watchers of one busy task.** ``--watchers`` SSE connections follow one task
   while ``--events`` events are appended to it at 100 a second (as an engine writes them).
   Every watcher must receive every event, in order, once. Reported: delivery latency
   from the append to each watcher's receipt (p50 / p99 / max) and the total delivered.

The script reports; it does not assert. It removes what it made.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from errand.tasks.store.tasks import TaskStore


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_server(home: Path, database: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "ERRAND_HOME": str(home), "ERRAND_DATABASE_URL": database}
    env.pop("ERRAND_TOKEN", None)
    log = open(home / "serve.log", "wb")  # noqa: SIM115 - lives as long as the server
    process = subprocess.Popen([sys.executable, "-m", "errand", "serve", "--no-engine", "--port", str(port),
                                "--log-level", "warning"], env=env, stdout=log, stderr=log, cwd=home)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/api/tasks?limit=1", timeout=2)
            return process, url
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit(f"the server did not start; see {home / 'serve.log'}")


async def steady_load(url: str, ids: list[str], rate: float, seconds: float) -> dict[str, list[float]]:
    latencies: dict[str, list[float]] = {"list": [], "show": []}
    errors = 0
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=10) as client:
        async def one(kind: str, path: str, due: float) -> None:
            nonlocal errors
            response = await client.get(path)
            if response.status_code != 200:
                errors += 1
            latencies[kind].append((time.perf_counter() - due) * 1000)

        for warm in range(20):
            await client.get(f"/api/tasks/{ids[warm]}")
        started = time.perf_counter()
        pending = []
        total = int(rate * seconds)
        for n in range(total):
            due = started + n / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            kind, path = ("list", "/api/tasks?limit=50") if n % 2 else ("show", f"/api/tasks/{random.choice(ids)}")
            pending.append(asyncio.create_task(one(kind, path, due)))
        await asyncio.gather(*pending)
        achieved = total / (time.perf_counter() - started)
    latencies["errors"] = [float(errors)]
    latencies["achieved"] = [achieved]
    return latencies


async def watcher(host: str, port: int, task_id: str, expected: int, received: list[tuple[int, float]],
                  ready: asyncio.Event, connected: list[int]) -> None:
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
    writer.write(f"GET /api/tasks/{task_id}/events/stream HTTP/1.1\r\nHost: {host}:{port}\r\n"
                 "Accept: text/event-stream\r\n\r\n".encode())
    await writer.drain()
    while (await reader.readline()) not in (b"\r\n", b""):
        pass  # the response head
    connected.append(1)
    ready.set()
    try:
        while len(received) < expected:
            line = await reader.readline()
            if not line:
                return
            if line.startswith(b"id: "):
                received.append((int(line[4:]), time.time()))
    finally:
        writer.close()


async def watchers_load(url: str, store: TaskStore, task_id: str, count: int, events: int,
                        rate: float) -> dict[str, float]:
    host, port = url.removeprefix("http://").split(":")
    received: list[list[tuple[int, float]]] = [[] for _ in range(count)]
    connected: list[int] = []
    ready = asyncio.Event()
    tasks = [asyncio.create_task(watcher(host, int(port), task_id, events, received[n], ready, connected))
             for n in range(count)]
    deadline = time.monotonic() + 60
    while len(connected) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    appended: dict[int, float] = {}
    started = time.perf_counter()
    for n in range(events):
        due = started + n / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        at = time.time()
        event_id = await asyncio.to_thread(store.append_event, task_id, None, "output", {"text": f"line {n}\n"})
        appended[event_id] = at
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
    except TimeoutError:
        for task in tasks:
            task.cancel()
    order = sorted(appended)
    complete = sum(1 for got in received if [event_id for event_id, _ in got] == order)
    delays = [(seen - appended[event_id]) * 1000 for got in received for event_id, seen in got
              if event_id in appended]
    return {"connected": len(connected), "complete": complete, "delivered": sum(len(g) for g in received),
            "expected": count * events, "p50": percentile(delays, 0.5), "p99": percentile(delays, 0.99),
            "max": max(delays)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--watchers", type=int, default=500)
    parser.add_argument("--events", type=int, default=400)
    parser.add_argument("--event-rate", type=float, default=100)
    parser.add_argument("--quick", action="store_true", help="a run of seconds: 1 s of load, 10 watchers, 20 events")
    options = parser.parse_args()
    if options.quick:
        options.rate, options.seconds, options.watchers, options.events = 50, 1, 10, 20

    home = Path(tempfile.mkdtemp(prefix="errand-bench-server-"))
    database = f"sqlite:///{home / 'errand.db'}"
    store = TaskStore.open(database)
    ids = [store.create_task(title=f"task {n}", instruction=f"do thing {n}", repo=f"/srv/repo{n % 7}",
                             model="openai:m").id for n in range(500)]
    busy = ids[-1]
    process, url = start_server(home, database)
    try:
        print(f"errand server benchmark: {os.cpu_count()} cores, server pid {process.pid} at {url}", flush=True)
        load = asyncio.run(steady_load(url, ids, options.rate, options.seconds))
        print(f"\n1. list and show, {options.rate:.0f} requests/s for {options.seconds:.0f}s "
              f"(achieved {load['achieved'][0]:.0f}/s, {load['errors'][0]:.0f} errors)")
        print(f"   {'request':12} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}   target p99 ≤ 50 ms")
        for kind in ("list", "show"):
            values = load[kind]
            print(f"   {kind:12} {len(values):6d} {statistics.median(values):8.1f} {percentile(values, 0.99):8.1f} "
                  f"{max(values):8.1f}")
        both = load["list"] + load["show"]
        print(f"   {'both':12} {len(both):6d} {statistics.median(both):8.1f} {percentile(both, 0.99):8.1f} "
              f"{max(both):8.1f}")

        figures = asyncio.run(watchers_load(url, store, busy, options.watchers, options.events, options.event_rate))
        print(f"\n2. {options.watchers} SSE watchers of one task, {options.events} events at "
              f"{options.event_rate:.0f}/s")
        print(f"   connected {figures['connected']:.0f}, every event in order at {figures['complete']:.0f} of "
              f"{options.watchers} watchers; {figures['delivered']:.0f} of {figures['expected']:.0f} deliveries")
        print(f"   append → receipt: p50 {figures['p50']:.0f} ms, p99 {figures['p99']:.0f} ms, "
              f"max {figures['max']:.0f} ms")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        store.close()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
