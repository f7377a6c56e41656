"""A resolver that fails for now is an outage, told apart from a name that does not exist.

The egress proxy looks a name up on the host. When the host's resolver does not answer, or answers
SERVFAIL, the lookup fails for now (EAI_AGAIN): the proxy answers 503, which clients retry as they
retry an outage met directly, and counts the host among those that did not answer. A name the
resolver says does not exist stays 502. The proxy runs in a process of the test's own, in a mount
namespace whose /etc/resolv.conf names a DNS server the test runs on a loopback address of its
own; glibc's real resolver asks it. Nothing leaves the machine.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import random
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from errand.sandbox import Network
from errand.sandbox._egress.proxy import LOOKUP_THREADS, LOOKUPS_PER_SANDBOX, EgressProxy
from errand.tasks.service import MAX_ATTEMPTS
from proxied import asked

# What the drills below run in their namespace first: a DNS server (on the address in argv[1]) that
# answers by name (a name beginning "silent" never, one in ``away`` not for now; "servfail." and
# "nxdomain." so; any other: A 127.0.0.1), noting each name asked; an origin on loopback; imports.
_SERVING = r"""
import asyncio, json, socket, struct, sys, threading
from pathlib import Path
from errand.sandbox import Network
from errand.sandbox._egress.proxy import EgressProxy

asked = set()
away = set()  # names the server does not answer for now

def dns(server):
    while True:
        query, peer = server.recvfrom(512)
        labels, at = [], 12
        while query[at]:
            labels.append(query[at + 1:at + 1 + query[at]].decode()); at += 1 + query[at]
        name, qtype = ".".join(labels), struct.unpack("!H", query[at + 1:at + 3])[0]
        asked.add(name)
        question = query[12:at + 5]
        if name.startswith("silent") or name in away:
            continue  # a resolver that does not answer
        rcode = {"servfail": 2, "nxdomain": 3}.get(name.split(".")[0], 0)
        answers = b""
        if rcode == 0 and qtype == 1:
            answers = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 0, 4) + socket.inet_aton("127.0.0.1")
        header = query[:2] + struct.pack("!HHHHH", 0x8180 | rcode, 1, 1 if answers else 0, 0, 0)
        server.sendto(header + question + answers, peer)

def serving_dns():
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind((sys.argv[1], 53))
    threading.Thread(target=dns, args=(server,), daemon=True).start()

async def origin(reader, writer):
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    await writer.drain(); writer.close()

# The DNS server, an origin and the proxy serving sandbox_id, which may reach names at the origin.
async def proxying(sandbox_id, names):
    serving_dns()
    web = await asyncio.start_server(origin, "127.0.0.1", 0)
    port = web.sockets[0].getsockname()[1]
    listener = socket.socket(); listener.bind(("127.0.0.1", 0)); listener.listen(8)
    proxy = EgressProxy()
    await proxy.serve(sandbox_id, listener, Network.allow(*[f"{n}:{port}" for n in names],
                                                            cidrs=[f"127.0.0.1/32:{port}"]), Path(sys.argv[2]))
    return proxy, listener, port
"""

# Run in the namespace: the proxy, and a request through it for each name; prints what each was
# answered and the hosts the proxy's ledger says did not answer.
_DRILL = _SERVING + r"""
NAMES = ["silent.dns.test", "servfail.dns.test", "nxdomain.dns.test", "found.dns.test"]

async def main():
    proxy, listener, port = await proxying("sb-dns", NAMES)
    ledger, said = proxy._ledgers["sb-dns"], {}
    for name in NAMES:
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        writer.write(f"GET http://{name}:{port}/ HTTP/1.1\r\nHost: {name}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        said[name] = (await asyncio.wait_for(reader.read(), 60)).decode(errors="replace")
        writer.close()
    reader, writer = await asyncio.open_connection(*listener.getsockname())  # a tunnel, refused before it opens
    writer.write(f"CONNECT servfail.dns.test:{port} HTTP/1.1\r\nHost: servfail.dns.test:{port}\r\n\r\n".encode())
    await writer.drain()
    said["CONNECT servfail.dns.test"] = (await asyncio.wait_for(reader.read(), 60)).decode(errors="replace")
    writer.close()
    for _ in range(500):  # refusals are recorded as their connections end
        if ledger.refusals == 4:
            break
        await asyncio.sleep(0.01)
    await proxy.stop("sb-dns")
    print(json.dumps({"said": said, "refusals": ledger.refusals, "unanswered": [h for h, _ in ledger.unanswered()]}))

asyncio.run(main())
"""


def _drill(tmp_path: Path, script: str, resolver_timeout: int) -> dict[str, Any]:
    """What ``script`` printed last (JSON), run in a mount namespace of its own whose resolver is a DNS
    server the script runs on a loopback address it is given (argv[1]; argv[2]: a log path)."""
    address = f"127.53.{random.randrange(1, 255)}.{random.randrange(1, 255)}"
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(f"nameserver {address}\noptions timeout:{resolver_timeout} attempts:1\n")
    # Names looked up through resolv.conf's server alone: a host whose nsswitch.conf asks another
    # (systemd-resolved's nss-resolve, say) would send these names off the machine and never here.
    nsswitch = tmp_path / "nsswitch.conf"
    nsswitch.write_text("hosts: files dns\n")
    env = {key: value for key, value in os.environ.items() if key != "ERRAND_EGRESS_HOSTS"}
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         'mount --bind "$1" /etc/resolv.conf && mount --bind "$2" /etc/nsswitch.conf && exec "$3" -c "$4" "$5" "$6"',
         "sh", str(resolv), str(nsswitch), sys.executable, script, address, str(tmp_path / "egress.log")],
        capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


@pytest.mark.faults
def test_a_resolver_that_fails_for_now_is_unavailable_and_a_name_that_does_not_exist_a_bad_gateway(
        tmp_path: Path) -> None:
    found = _drill(tmp_path, _DRILL, resolver_timeout=1)
    said = {name: answer.partition("\r\n")[0] for name, answer in found["said"].items()}
    assert said == {"silent.dns.test": "HTTP/1.1 503 Service Unavailable",
                    "servfail.dns.test": "HTTP/1.1 503 Service Unavailable",
                    "nxdomain.dns.test": "HTTP/1.1 502 Bad Gateway",
                    "found.dns.test": "HTTP/1.1 200 OK",
                    "CONNECT servfail.dns.test": "HTTP/1.1 503 Service Unavailable"}, found["said"]
    assert "could not be looked up" in found["said"]["silent.dns.test"]
    assert "cannot resolve nxdomain.dns.test" in found["said"]["nxdomain.dns.test"]
    assert found["refusals"] == 4 and sorted(found["unanswered"]) == ["servfail.dns.test", "silent.dns.test"]


@pytest.mark.faults
@pytest.mark.parametrize("method", ["GET", "CONNECT"])
async def test_a_lookup_the_proxy_itself_cannot_make_is_answered_unavailable_and_logged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    """getaddrinfo fails on the proxy's side (EAI_SYSTEM: out of descriptors, a sandbox's 512
    connections held open among others'): Python raises a plain OSError for it, not a gaierror.
    The client is answered 503 (retried, as for an outage) and the refusal logged with its reason;
    before, the connection was dropped unanswered, unlogged, with a traceback in the worker's log."""
    name = "busy.dns.test"
    real = socket.getaddrinfo

    def out_of_descriptors(host: object, *args: object, **kwargs: object) -> object:
        if host == name:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", out_of_descriptors)
    monkeypatch.delenv("ERRAND_EGRESS_HOSTS", raising=False)
    target = f"{name}:443" if method == "CONNECT" else f"http://{name}/"
    answer, ledger = await asked(tmp_path / "egress.log", Network.allow(f"{name}:443", f"{name}:80"),
                                 f"{method} {target} HTTP/1.1\r\nHost: {name}\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 503 Service Unavailable"), answer
    assert b"Too many open files" in answer, answer
    assert ledger.refusals == 1


# A resolver that never answers, and a sandbox asking it many names at once: its lookups must hold
# neither the event loop's default threads (the worker's store calls and file work wait on them)
# nor the lookup threads another sandbox needs. Prints the order in which a plain to_thread call,
# the other sandbox's lookup of a name the server answers, and the silent names' answers came back.
_CROWD = _SERVING + r"""
import concurrent.futures
SILENT = [f"silent-{n}.dns.test" for n in range(8)]

async def ask(listener, name, port, tag, order, said):
    reader, writer = await asyncio.open_connection(*listener.getsockname())
    writer.write(f"GET http://{name}:{port}/ HTTP/1.1\r\nHost: {name}:{port}\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    said[name] = (await asyncio.wait_for(reader.read(), 60)).decode(errors="replace").partition("\r\n")[0]
    order.append(tag)
    writer.close()

def listening():
    listener = socket.socket(); listener.bind(("127.0.0.1", 0)); listener.listen(64)
    return listener

async def main():
    # The default executor two cores get (six threads), on any machine: with more cores it has more
    # than the crowd's eight lookups fill, and the lookups' own threads would go untested.
    asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(6))
    serving_dns()
    web = await asyncio.start_server(origin, "127.0.0.1", 0)
    port = web.sockets[0].getsockname()[1]
    crowd, other = listening(), listening()
    proxy = EgressProxy()
    loopback = [f"127.0.0.1/32:{port}"]
    await proxy.serve("sb-crowd", crowd, Network.allow(*[f"{n}:{port}" for n in SILENT], cidrs=loopback),
                      Path(sys.argv[2]))
    await proxy.serve("sb-other", other, Network.allow(f"found.dns.test:{port}", cidrs=loopback),
                      Path(sys.argv[2] + ".other"))
    order, said = [], {}
    silent = [asyncio.ensure_future(ask(crowd, name, port, "silent", order, said)) for name in SILENT]
    while len(asked) < 4:  # the crowd's lookups are under way, each holding a thread
        await asyncio.sleep(0.01)
    async def free_thread():
        await asyncio.to_thread(lambda: None)
        order.append("to_thread")
    await asyncio.gather(free_thread(), ask(other, "found.dns.test", port, "other sandbox", order, said), *silent)
    await proxy.stop("sb-crowd"); await proxy.stop("sb-other")
    print(json.dumps({"order": order, "said": said}))

asyncio.run(main())
"""


@pytest.mark.faults
def test_a_sandbox_asking_a_silent_resolver_many_names_holds_up_neither_the_worker_nor_another_sandbox(
        tmp_path: Path) -> None:
    """Each lookup of a name the resolver never answers holds a thread for the resolver's timeout.
    Eight at once from one sandbox took every thread of the event loop's default executor (six on
    two cores), so the worker's own thread work (its store calls) and another sandbox's lookup of a
    name that answers waited for them."""
    found = _drill(tmp_path, _CROWD, resolver_timeout=2)
    assert sorted(found["order"][:2]) == ["other sandbox", "to_thread"], found["order"]
    assert found["said"]["found.dns.test"] == "HTTP/1.1 200 OK"
    assert {found["said"][f"silent-{n}.dns.test"] for n in range(8)} == {"HTTP/1.1 503 Service Unavailable"}


class _HeldLookups:
    """socket.getaddrinfo for names ending ``.held.test``: each noted, then held until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.asked: list[str] = []
        self.release = threading.Event()
        real = socket.getaddrinfo

        def held(host: object, *args: object, **kwargs: object) -> object:
            if isinstance(host, str) and host.endswith(".held.test"):
                self.asked.append(host)
                self.release.wait(30)
                raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
            return real(host, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(socket, "getaddrinfo", held)
        monkeypatch.delenv("ERRAND_EGRESS_HOSTS", raising=False)

    async def asked_at_least(self, count: int) -> None:
        for _ in range(3000):
            if len(self.asked) >= count:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"only {self.asked} were looked up")


async def _ended(proxy: EgressProxy, *sandbox_ids: str) -> None:
    """Once every connection of the sandboxes has ended (their held lookups released)."""
    for _ in range(3000):
        if not any(proxy._live.get(sandbox_id) for sandbox_id in sandbox_ids):
            return
        await asyncio.sleep(0.01)


async def _ask_through(listener: socket.socket, name: str) -> asyncio.StreamWriter:
    _reader, writer = await asyncio.open_connection(*listener.getsockname())
    writer.write(f"CONNECT {name}:443 HTTP/1.1\r\nHost: {name}:443\r\n\r\n".encode())
    await writer.drain()
    return writer


@pytest.mark.faults
@pytest.mark.parametrize("change", ["stopped", "name denied"])
async def test_a_lookup_that_waited_its_turn_is_not_made_once_the_sandbox_stopped_or_its_name_was_denied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    """A sandbox's lookups beyond LOOKUPS_PER_SANDBOX wait their turn. One whose sandbox stops
    meanwhile would otherwise still be made (a thread held for the resolver's timeout, for a
    sandbox that is gone: a sandbox of 512 connections to a silent name held 4 threads for 128
    timeouts after it ended); one whose name the policy denies meanwhile would be asked of the
    resolver, which the policy promises a denied name never is."""
    lookups = _HeldLookups(monkeypatch)
    names = [f"n{n}.held.test" for n in range(LOOKUPS_PER_SANDBOX + 3)]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    proxy = EgressProxy()
    await proxy.serve("sb-held", listener, Network.allow(*[f"{name}:443" for name in names]), tmp_path / "egress.log")
    writers = []
    try:
        for name in names:
            writers.append(await _ask_through(listener, name))
        await lookups.asked_at_least(LOOKUPS_PER_SANDBOX)
        await asyncio.sleep(0.2)  # the others are waiting their turn
        made = list(lookups.asked)
        assert len(made) == LOOKUPS_PER_SANDBOX, made
        if change == "stopped":
            await proxy.stop("sb-held")
        else:
            proxy.set_policy("sb-held", Network.allow(*[f"{name}:443" for name in made]))
        lookups.release.set()
        await asyncio.sleep(0.5)  # the lookups in flight end; any waiting would be made now
    finally:
        lookups.release.set()
        await _ended(proxy, "sb-held")
        await proxy.stop("sb-held")
        for writer in writers:
            writer.close()
    assert lookups.asked == made


@pytest.mark.faults
async def test_a_task_whose_attempts_all_ask_a_silent_resolver_holds_up_no_other_sandbox(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task of MAX_ATTEMPTS attempts runs that many sandboxes at once, each the same agent on the
    same prompt: each may hold LOOKUPS_PER_SANDBOX lookups for the resolver's timeout. Another
    sandbox's lookup must not wait for them (with sixteen threads, four such sandboxes took every
    one: the other's lookup waited a whole timeout, or several)."""
    lookups = _HeldLookups(monkeypatch)
    crowd = [f"sb-attempt-{n}" for n in range(MAX_ATTEMPTS)]
    policy = Network.allow("*.held.test:443", "answered.test:443")
    listeners = {}
    proxy = EgressProxy()
    for sandbox_id in [*crowd, "sb-other"]:
        listener = listeners[sandbox_id] = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        await proxy.serve(sandbox_id, listener, policy, tmp_path / f"{sandbox_id}.log")
    real = socket.getaddrinfo

    def answered(host: object, *args: object, **kwargs: object) -> object:
        if host == "answered.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.1", 443))]
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", answered)  # under the held names
    writers = []
    try:
        for sandbox_id in crowd:
            for n in range(LOOKUPS_PER_SANDBOX):
                writers.append(await _ask_through(listeners[sandbox_id], f"n{n}.{sandbox_id}.held.test"))
        await lookups.asked_at_least(min(LOOKUP_THREADS, MAX_ATTEMPTS * LOOKUPS_PER_SANDBOX))
        reader, writer = await asyncio.open_connection(*listeners["sb-other"].getsockname())
        writers.append(writer)
        writer.write(b"CONNECT answered.test:443 HTTP/1.1\r\nHost: answered.test:443\r\n\r\n")
        await writer.drain()
        # Its lookup answers at once (the address is a documentation one: nothing is reached, or the
        # proxy says so): the answer, or the tunnel, comes well within the held lookups' 30 s.
        answer = await asyncio.wait_for(reader.readline(), 20)
    finally:
        lookups.release.set()
        for writer in writers:
            writer.close()
        await _ended(proxy, *listeners)
        for sandbox_id in listeners:
            await proxy.stop(sandbox_id)
    assert answer.startswith(b"HTTP/1.1 200"), answer


_FORKED = r"""
import os
from errand.sandbox._egress.proxy import _lookup_threads

assert _lookup_threads().submit(lambda: "parent").result(timeout=10) == "parent"
child = os.fork()
if child == 0:
    try:
        os._exit(0 if _lookup_threads().submit(lambda: "child").result(timeout=10) == "child" else 1)
    except BaseException:
        os._exit(1)
_, status = os.waitpid(child, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_a_process_forked_after_a_lookup_can_look_names_up() -> None:
    """The lookup threads' pool is made once a process; a child forked from a process that has
    used it gets a copy without threads, that counted the parent's idle ones and so made none:
    its lookups never ran."""
    done = subprocess.run([sys.executable, "-c", _FORKED], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.strip() == "0", done.stdout + done.stderr


@pytest.mark.faults
async def test_an_address_asked_for_as_such_waits_for_no_lookup(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox whose LOOKUPS_PER_SANDBOX lookups all wait on a silent resolver still reaches an
    address it names as such (or one the proxy's own hosts file gives): there is nothing to look up."""
    lookups = _HeldLookups(monkeypatch)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    proxy = EgressProxy()
    await proxy.serve("sb-literal", listener, Network.allow("*.held.test:443", cidrs=["192.0.2.0/24:443"]),
                      tmp_path / "egress.log")
    writers = []
    try:
        for n in range(LOOKUPS_PER_SANDBOX):
            writers.append(await _ask_through(listener, f"n{n}.held.test"))
        await lookups.asked_at_least(LOOKUPS_PER_SANDBOX)
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        writers.append(writer)
        writer.write(b"CONNECT 192.0.2.1:443 HTTP/1.1\r\nHost: 192.0.2.1:443\r\n\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.readline(), 20)  # well within the held lookups' 30 s
    finally:
        lookups.release.set()
        for writer in writers:
            writer.close()
        await _ended(proxy, "sb-literal")
        await proxy.stop("sb-literal")
    assert answer.startswith(b"HTTP/1.1 200"), answer


# The resolver away for one name across a client's retries, then back: each ask while it is away is
# answered 503 (the client retries it as an outage), the first after it is back goes through.
_BACK = _SERVING + r"""
async def get(listener, name, port):
    reader, writer = await asyncio.open_connection(*listener.getsockname())
    writer.write(f"GET http://{name}:{port}/ HTTP/1.1\r\nHost: {name}:{port}\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    answer = (await asyncio.wait_for(reader.read(), 60)).decode(errors="replace").partition("\r\n")[0]
    writer.close()
    return answer

async def main():
    proxy, listener, port = await proxying("sb-back", ["index.dns.test"])
    ledger = proxy._ledgers["sb-back"]
    away.add("index.dns.test")
    said = [await get(listener, "index.dns.test", port) for _ in range(3)]
    away.clear()
    said.append(await get(listener, "index.dns.test", port))
    await proxy.stop("sb-back")
    print(json.dumps({"said": said, "unanswered": [h for h, _ in ledger.unanswered()], "refusals": ledger.refusals}))

asyncio.run(main())
"""


@pytest.mark.faults
def test_a_resolver_away_across_a_clients_retries_and_then_back_answers_each_ask_and_then_lets_it_through(
        tmp_path: Path) -> None:
    found = _drill(tmp_path, _BACK, resolver_timeout=1)
    assert found["said"] == ["HTTP/1.1 503 Service Unavailable"] * 3 + ["HTTP/1.1 200 OK"], found
    assert found["refusals"] == 3 and found["unanswered"] == ["index.dns.test"]
