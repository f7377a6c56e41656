"""Request heads an adversary in the sandbox writes by hand to the egress proxy, and connections
it holds half-sent: refused, and the proxy serves on, for this sandbox and the others it serves.

The lenient test host answers whatever reaches it, so a second request hidden in a
head (a header line ended by a bare CR or LF, a folded line carrying a Host) would be
seen there if the proxy passed it on; the test checks the host saw nothing of it.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from errand import Network
from nethosts import ALLOWED, LENIENT, OTHER, EgressHosts, TestCA, TestHost
from security.test_egress import QUIET, curl, get, lenient, sandbox_with  # noqa: F401 - lenient: a fixture

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes and test hosts need root"),
              pytest.mark.faults]

PER_SANDBOX = 512  # connections the proxy holds for one sandbox at once

HEADS = {
    "a bare CR ends a header line": get(f"http://{LENIENT}/a", LENIENT).replace(
        b"\r\n\r\n", f"\r\nX-A: 1\rHost: {OTHER}\r\n\r\n".encode()),
    "a bare LF ends a header line": get(f"http://{LENIENT}/a", LENIENT).replace(
        b"\r\n\r\n", f"\r\nX-A: 1\nHost: {OTHER}\r\n\r\n".encode()),
    "a folded line carries a Host": get(f"http://{LENIENT}/a", LENIENT, "X-A: 1", f" Host: {OTHER}"),
    "a NUL in a header": get(f"http://{LENIENT}/a", LENIENT, "X-A: 1\0" + OTHER),
    "a CR LF inside the target": f"GET http://{LENIENT}/a\r\nHost: {OTHER} HTTP/1.1\r\nHost: {LENIENT}\r\n\r\n"
                                 .encode(),
    "a head of 70 kB": get(f"http://{LENIENT}/a", LENIENT, "X-A: " + "a" * 70_000),
    "ten thousand headers": get(f"http://{LENIENT}/a", LENIENT, *(f"X-{n}: v" for n in range(10_000))),
}

# Inside the sandbox: the head in the file named, sent whole to the proxy; the statuses it answered.
SEND = r'''
import json, socket, sys
sock = socket.create_connection(("127.0.0.1", 3128), timeout=15)
try:
    sock.sendall(open(sys.argv[1], "rb").read())
    sock.shutdown(socket.SHUT_WR)
except OSError:
    pass  # refused before it had all: what it said is still read
data = b""
try:
    while chunk := sock.recv(65536):
        data += chunk
except OSError:
    pass
text = data.decode("latin-1")
print(json.dumps([int(line.split(" ")[1]) for line in text.split("\n") if line.startswith("HTTP/1.")]))
'''

# Inside an attacker's sandbox: ``count`` connections to ``port`` (the proxy's, the gateway relay's),
# each sending ``start`` (half a head) and never the rest; say how many connected, then hold them.
HOLD = r'''
import resource, socket, sys, time
count, port, start = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
held = []
for _ in range(count):
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.send(start)
    except OSError:
        continue
    held.append(sock)
print("holding", len(held), flush=True)
time.sleep(600)
'''


async def test_heads_that_hide_a_line_or_overflow_are_refused_and_the_proxy_serves_on(
        backend: str, lenient: TestHost, test_ca: TestCA) -> None:  # noqa: F811 - lenient is the fixture
    mark = lenient.mark()
    answers = {}
    async with sandbox_with(backend, Network.allow(LENIENT), test_ca) as sb:
        await sb.files.write("/tmp/send.py", SEND)
        for name, head in HEADS.items():
            await sb.files.write("/tmp/head", head)
            sent = await sb.run("/usr/bin/python3", "/tmp/send.py", "/tmp/head", timeout=60)
            assert sent.exit_code == 0, sent.stderr
            answers[name] = json.loads(sent.stdout)
        after = await curl(sb, f"http://{LENIENT}/after")
    await asyncio.sleep(QUIET)
    for name, statuses in answers.items():
        assert statuses in ([400], [431]), (name, statuses)
    seen = lenient.events(mark, ev="http")
    assert [event["path"] for event in seen] == ["/after"], seen
    assert lenient.events(mark, host=OTHER) == []
    assert after.http_code == 200, after


@pytest.mark.slow
async def test_a_sandbox_holding_half_sent_heads_does_not_hold_up_another(backend: str, egress_hosts: EgressHosts,
                                                                          test_ca: TestCA) -> None:
    """Slow loris: one sandbox opens more connections than the proxy keeps for it and sends none of
    its heads whole; another sandbox's request goes through meanwhile, and so does one of its own
    once it lets one go."""
    async with sandbox_with(backend, Network.allow(ALLOWED), test_ca) as attacker, \
            sandbox_with(backend, Network.allow(ALLOWED), test_ca) as victim:
        await attacker.files.write("/tmp/hold.py", HOLD)
        holding = await attacker.exec("/usr/bin/python3", "/tmp/hold.py", str(PER_SANDBOX + 100), "3128",
                                      "CONNECT allowed")
        said = str(await anext(aiter(holding.stdout)))
        assert said.startswith("holding"), said
        served = await curl(victim, f"https://{ALLOWED}/bytes/1024")
        assert (served.exit_code, served.connect_code, served.http_code, served.size) == (0, 200, 200, 1024), served
        log = await attacker.egress_log()
    assert any("too many connections at once" in event.reason for event in log), log[-3:]
