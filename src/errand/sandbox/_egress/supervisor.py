"""The egress proxy of a detached sandbox, served by a process that lives as long as it.

A detached sandbox (``errand sandbox create``) outlives the process that made
it, so its proxy cannot live there. That process starts this supervisor
(``python -m errand.sandbox._egress.supervisor``), hands it the launcher's channel,
and returns. The supervisor serves the proxy, takes policy changes from any
process over ``<runtime>/<id>/egress.ctl`` (root-only), and exits when the
sandbox ends; if the supervisor dies, the sandbox has no way out (it fails
closed, never open).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys

from errand.errors import SandboxError
from errand.sandbox._backends.registry import Record
from errand.sandbox._egress.gateway import GatewayRelay
from errand.sandbox._egress.intercept import Interceptor
from errand.sandbox._egress.proxy import EgressProxy, receive_listeners
from errand.sandbox.network import Network

__all__ = ["set_supervised_policy", "start_supervisor"]

_READY = b"ready\n"


async def start_supervisor(record: Record, channel: socket.socket, network: Network,
                           gateway: str | None = None, interceptor: Interceptor | None = None) -> None:
    """Start the supervisor with the launcher's channel; return once it serves the proxy (and
    relays the gateway's listener, if the sandbox has one). The sandbox's declared secrets go
    to it over its stdin."""
    policy = json.dumps(_policy_fields(network))
    with open(record.directory / "supervisor.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "errand.sandbox._egress.supervisor", record.id, str(channel.fileno()), policy,
             *([gateway] if gateway is not None else [])],
            pass_fds=(channel.fileno(),), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            start_new_session=True)
    channel.close()
    assert process.stdout is not None and process.stdin is not None
    with process.stdin:  # a few kilobytes: the pipe holds them until the supervisor reads
        if interceptor is not None:
            process.stdin.write(json.dumps(interceptor.to_state()).encode())
    try:
        # The supervisor daemonizes (its first process exits at once), so nothing is left to reap.
        line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 30)
    finally:
        process.stdout.close()
        await asyncio.to_thread(process.wait)
    if line != _READY:
        raise SandboxError(f"the egress supervisor of {record.id} did not start: "
                           f"{(record.directory / 'supervisor.log').read_text(errors='replace')[-2000:]}",
                           sandbox_id=record.id, code="start_failed")


async def set_supervised_policy(record: Record, network: Network) -> None:
    try:
        reader, writer = await asyncio.open_unix_connection(str(record.directory / "egress.ctl"))
    except OSError as error:
        raise SandboxError(f"the egress supervisor of {record.id} is gone ({error.strerror}); the sandbox "
                           "has no way out", sandbox_id=record.id, code="no_proxy") from None
    writer.write(json.dumps(_policy_fields(network)).encode() + b"\n")
    await writer.drain()
    answer = json.loads(await reader.readline() or b"{}")
    writer.close()
    if not answer.get("ok"):
        raise SandboxError(f"the egress supervisor refused the policy: {answer.get('error')}",
                           sandbox_id=record.id, code="policy_refused")


def _policy_fields(network: Network) -> dict[str, object]:
    return network.to_dict()


async def _serve(sandbox_id: str, channel_fd: int, policy: Network, gateway: str | None,
                 interceptor: Interceptor | None) -> None:
    record = Record.load(sandbox_id)
    if record is None:
        raise SystemExit(f"no record for {sandbox_id}")
    wanted = 1 if gateway is None else 2
    listeners = await receive_listeners(socket.socket(fileno=channel_fd), wanted)
    if len(listeners) != wanted:
        raise SystemExit("the launcher sent no listener")
    proxy = EgressProxy()
    await proxy.serve(sandbox_id, listeners[0], policy, record.directory / "egress.log", interceptor)
    relay = GatewayRelay(gateway) if gateway is not None else None
    if relay is not None:
        await relay.serve(listeners[1])

    async def control(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            network = Network.from_dict(json.loads(await reader.readline()))
            closed = proxy.set_policy(sandbox_id, network)
            writer.write(json.dumps({"ok": True, "closed": closed}).encode() + b"\n")
        except (ValueError, SandboxError, Exception) as error:  # noqa: BLE001 - reported to the caller
            writer.write(json.dumps({"ok": False, "error": str(error)}).encode() + b"\n")
        await writer.drain()
        writer.close()

    path = str(record.directory / "egress.ctl")
    server = await asyncio.start_unix_server(control, path=path)
    os.chmod(path, 0o600)
    ended = asyncio.Event()
    pidfd = os.pidfd_open(record.pid)
    asyncio.get_running_loop().add_reader(pidfd, ended.set)
    sys.stdout.buffer.write(_READY)
    sys.stdout.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the creator stops listening after "ready"
    await ended.wait()
    server.close()
    if relay is not None:
        relay.close()
    await proxy.stop(sandbox_id)


def main() -> None:
    sandbox_id, channel_fd, policy = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    gateway = sys.argv[4] if len(sys.argv) > 4 else None
    state = sys.stdin.buffer.read()  # the declared secrets, if any, then EOF
    interceptor = Interceptor.from_state(json.loads(state)) if state else None
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    if os.fork() > 0:
        os._exit(0)  # the creator reaps this first process at once; the second serves
    asyncio.run(_serve(sandbox_id, channel_fd, Network.from_dict(policy), gateway, interceptor))


if __name__ == "__main__":
    main()
