#!/usr/bin/env python3
"""What errand's egress proxy adds to a connection, measured against going direct.

    .venv/bin/python benchmarks/egress.py [--runs N] [--rounds R] [--json PATH] [--quick]

Makes its own test host (``tests/nethosts.py``: a network namespace on a veth
pair at 203.0.113.x with HTTPS on 443, HTTP on 80, a TCP echo on 7 and a TLS
echo on 7443, its certificate signed by a throwaway CA) and removes it again,
also on Ctrl-C or SIGTERM. The only name used, ``allowed.errand.test``, is
mapped to the test host through ``ERRAND_EGRESS_HOSTS``: nothing is looked up.

The same client script (``/usr/bin/python3``, the real interpreter) runs

* **direct**: in the host's network namespace, which has a route to the test
  host, connecting to its address as a program would without errand;
* **via proxy**: inside an errand sandbox allowed ``allowed.errand.test`` (and its
  echo ports),
  through the proxy at 127.0.0.1:3128 of the sandbox's own namespace
  (CONNECT for TLS, an absolute-form GET for plain HTTP), as curl or pip would.

Figures, each p50/p95 over N samples (after warm-ups), in milliseconds:

* connect: TCP connect (direct), or TCP connect to the proxy + CONNECT until
  its ``200`` (the proxy answers once it has connected upstream) — to the
  HTTPS port and to the TCP echo port;
* first byte: from the start of connecting until the first byte of the HTTP
  response — HTTPS (connect, TLS handshake verified against the CA, GET) and
  plain HTTP;
* echo round trip: one 32-byte message and its echo on an already open
  connection — the TLS echo through a tunnel (the proxy admits only TLS in
  CONNECT tunnels), and the plain TCP echo direct only, for reference.

Direct and proxied runs alternate in R rounds so drift hits both alike. The
added overhead (proxy minus direct) is printed beside the targets: added
connect p50 ≤ 1 ms and added first byte p50 ≤ 1 ms. The script reports, it
does not assert: it exits 0 whatever the figures are.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import nethosts
from errand import AsyncSandbox, Network

PYTHON = nethosts.PYTHON
NAME = nethosts.ALLOWED
TARGET_MS = 1.0  # added connect p50 and added first-byte p50

# Runs direct (host namespace) and inside the sandbox; prints {metric: [ms, ...]}.
CLIENT = r'''
import json, socket, ssl, sys, time

mode, name, address, runs, warmups, cafile = sys.argv[1:7]
runs, warmups = int(runs), int(warmups)
PROXY = ("127.0.0.1", 3128)
ctx = ssl.create_default_context(cafile=cafile)
now = time.perf_counter

def nodelay(sock):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock

def read_head(sock):
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise OSError("closed before the end of the head")
        head += chunk
    return head

def open_tcp(port):
    if mode == "direct":
        return nodelay(socket.create_connection((address, port)))
    sock = nodelay(socket.create_connection(PROXY))
    sock.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (name.encode(), port, name.encode(), port))
    head = read_head(sock)
    if not head.startswith(b"HTTP/1.1 200"):
        raise OSError("proxy refused: %r" % head[:80])
    return sock

def drain(sock):
    while sock.recv(65536):
        pass
    sock.close()

def connect(port):
    start = now()
    sock = open_tcp(port)
    took = now() - start
    sock.close()
    return took

def first_byte_https():
    start = now()
    conn = ctx.wrap_socket(open_tcp(443), server_hostname=name)
    conn.sendall(b"GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % name.encode())
    conn.recv(1)
    took = now() - start
    drain(conn)
    return took

def first_byte_http():
    start = now()
    if mode == "direct":
        sock = nodelay(socket.create_connection((address, 80)))
        sock.sendall(b"GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % name.encode())
    else:
        sock = nodelay(socket.create_connection(PROXY))
        sock.sendall(b"GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % ((name.encode(),) * 2))
    sock.recv(1)
    took = now() - start
    drain(sock)
    return took

def echo_round_trips(port, tls):
    sock = open_tcp(port)
    if tls:
        sock = ctx.wrap_socket(sock, server_hostname=name)
    message = b"x" * 32
    samples = []
    for _ in range(warmups + runs):
        start = now()
        sock.sendall(message)
        got = b""
        while len(got) < len(message):
            chunk = sock.recv(64)
            if not chunk:
                raise OSError("echo closed")
            got += chunk
        samples.append(now() - start)
    sock.close()
    return samples[warmups:]

def repeat(action, *args):
    samples = [action(*args) for _ in range(warmups + runs)]
    return samples[warmups:]

out = {
    "connect_https": repeat(connect, 443),
    "connect_echo": repeat(connect, 7),
    "first_byte_https": repeat(first_byte_https),
    "first_byte_http": repeat(first_byte_http),
    "rtt_tls_echo": echo_round_trips(7443, True),
}
if mode == "direct":
    out["rtt_tcp_echo"] = echo_round_trips(7, False)
print(json.dumps({k: [round(v * 1000, 4) for v in vs] for k, vs in out.items()}))
'''

ROWS = [
    ("connect_https", "connect, HTTPS port 443", True),
    ("connect_echo", "connect, TCP echo port 7", True),
    ("first_byte_https", "first byte, HTTPS (connect+TLS+GET)", True),
    ("first_byte_http", "first byte, plain HTTP port 80", True),
    ("rtt_tls_echo", "echo round trip, TLS echo 7443 (open tunnel)", False),
    ("rtt_tcp_echo", "echo round trip, plain TCP echo 7", False),
]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


async def run_direct(address: str, runs: int, warmups: int, ca: Path) -> dict[str, list[float]]:
    process = await asyncio.create_subprocess_exec(
        PYTHON, "-c", CLIENT, "direct", NAME, address, str(runs), str(warmups), str(ca),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"direct client failed: {stderr.decode()[-500:]}")
    return dict(json.loads(stdout))


async def run_proxied(sb: AsyncSandbox, address: str, runs: int, warmups: int) -> dict[str, list[float]]:
    result = await sb.run(PYTHON, "-c", CLIENT, "proxy", NAME, address, str(runs), str(warmups), "/tmp/ca.pem",
                          timeout=600)
    if result.exit_code != 0:
        raise RuntimeError(f"proxied client failed: {result.stderr[-500:]}")
    return dict(json.loads(result.stdout))


def table(direct: dict[str, list[float]], proxied: dict[str, list[float]], runs: int) -> list[dict[str, Any]]:
    rows = []
    for key, label, targeted in ROWS:
        d, p = direct.get(key, []), proxied.get(key, [])
        row: dict[str, Any] = {"metric": key, "label": label, "samples": len(d)}
        row["direct"] = (percentile(d, 0.5), percentile(d, 0.95)) if d else None
        row["proxy"] = (percentile(p, 0.5), percentile(p, 0.95)) if p else None
        if d and p:
            row["added"] = (row["proxy"][0] - row["direct"][0], row["proxy"][1] - row["direct"][1])
        row["target"] = TARGET_MS if targeted else None
        rows.append(row)
    return rows


def render(rows: list[dict[str, Any]], runs: int, rounds: int) -> str:
    def pair(value: tuple[float, float] | None, sign: bool = False) -> str:
        if value is None:
            return "n/a"
        fmt = "{:+.3f}" if sign else "{:.3f}"
        return f"{fmt.format(value[0])} / {fmt.format(value[1])}"

    lines = [f"egress proxy overhead, ms (p50 / p95 of {runs * rounds} samples each, {rounds} alternating rounds)",
             "",
             f"{'':46} {'direct':>17} {'via proxy':>17} {'added':>19}  target (added p50)",
             f"{'':46} {'-' * 17:>17} {'-' * 17:>17} {'-' * 19:>19}  ------------------"]
    for row in rows:
        if row["target"] is not None and "added" in row:
            verdict = "met" if row["added"][0] <= row["target"] else "MISSED"
            target = f"<= {row['target']:.0f} ms: {verdict}"
        elif row["proxy"] is None:
            target = "(tunnels must carry TLS)"
        else:
            target = ""
        lines.append(f"{row['label']:46} {pair(row['direct']):>17} {pair(row['proxy']):>17} "
                     f"{pair(row.get('added'), sign=True):>19}  {target}")
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        print("benchmarks/egress.py needs root (network namespaces, sandboxes)", file=sys.stderr)
        return 2
    ca = nethosts.TestCA()
    host = nethosts.TestHost(ca, label="bench", ipv6=False)
    saved = os.environ.get("ERRAND_EGRESS_HOSTS")
    try:
        host.start()
        os.environ["ERRAND_EGRESS_HOSTS"] = f"{NAME}={host.ipv4}"
        # Ports are part of the policy: the echo ports are named beside the default 443/80.
        policy = Network.allow(NAME, f"{NAME}:{nethosts.ECHO_PORT}", f"{NAME}:{nethosts.TLS_ECHO_PORT}")
        sb = await AsyncSandbox.create(network=policy, timeout=3600)
        try:
            await sb.files.write("/tmp/ca.pem", ca.pem)
            direct: dict[str, list[float]] = {}
            proxied: dict[str, list[float]] = {}
            per_round = max(1, args.runs // args.rounds)
            for _ in range(args.rounds):
                for key, values in (await run_direct(host.ipv4, per_round, args.warmups, ca.cert)).items():
                    direct.setdefault(key, []).extend(values)
                for key, values in (await run_proxied(sb, host.ipv4, per_round, args.warmups)).items():
                    proxied.setdefault(key, []).extend(values)
            log = await sb.egress_log()
        finally:
            await sb.terminate()
    finally:
        if saved is None:
            os.environ.pop("ERRAND_EGRESS_HOSTS", None)
        else:
            os.environ["ERRAND_EGRESS_HOSTS"] = saved
        host.stop()
        ca.remove()
    rows = table(direct, proxied, per_round * args.rounds)
    print(render(rows, per_round, args.rounds))
    denied = [e for e in log if e.verdict == "denied"]
    opened = [e for e in log if e.verdict == "allowed"]
    print(f"\nproxy log: {len(opened)} connections, {len(denied)} refused"
          f"{' (unexpected: ' + denied[0].reason + ')' if denied else ''}")
    print(f"machine: {platform.node()}, {os.cpu_count()} cpus, Linux {platform.release()}, "
          f"proxy on Python {platform.python_version()}, clients on {PYTHON}")
    leftovers = [line for line in os.popen("ip netns list").read().split() if line == host.netns]
    print(f"test host removed: {'yes' if not leftovers else 'NO: ' + host.netns}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "direct": direct, "proxy": proxied,
                                               "when": time.time()}, indent=1))
    return 0


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400, help="samples per figure and side (default 400)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating direct/proxy rounds (default 4)")
    parser.add_argument("--warmups", type=int, default=5, help="discarded samples per round (default 5)")
    parser.add_argument("--json", help="also write every sample here")
    parser.add_argument("--quick", action="store_true", help="a run of seconds: 20 samples in 1 round")
    signal.signal(signal.SIGTERM, _terminate)
    options = parser.parse_args()
    if options.quick:
        options.runs, options.rounds, options.warmups = 20, 1, 1
    try:
        sys.exit(asyncio.run(main(options)))
    except KeyboardInterrupt:
        sys.exit(130)
