"""The warm pool: sandboxes started ahead, each configured as its claim asks, replaced once taken."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from errand import AsyncSandbox, Network, Resources, _settings
from errand.errors import ConfigError, SandboxError
from errand.sandbox import Mount
from errand.sandbox.pool import AsyncSandboxPool
from hostfacts import cgroup_dir


async def eventually(check: Callable[[], bool | Awaitable[bool]], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result if isinstance(result, bool) else await result:
            return
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.05)


async def proxy_status(sandbox: AsyncSandbox, host: str) -> str:
    """The HTTP status errand's egress proxy answers a plain request for ``host`` with."""
    result = await sandbox.run("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20",
                               "-x", "http://127.0.0.1:3128", f"http://{host}/", timeout=60)
    return result.stdout.strip()


async def test_a_claim_takes_its_network_limits_env_workdir_labels_and_lifetime() -> None:
    async with await AsyncSandboxPool.start(size=1) as pool:
        assert pool.ready == 1
        sandbox = await pool.claim(network=Network.allow("allowed.pool.test"),
                                   resources=Resources(memory="256MiB", pids=64),
                                   env={"GREETING": "hello"}, workdir="/work/here", labels={"task": "t-1"},
                                   timeout=600)
        async with sandbox:
            assert pool.misses == 0
            shown = await sandbox.run("sh", "-c", 'echo "$GREETING"; pwd')
            assert shown.stdout.split() == ["hello", "/work/here"]
            assert (cgroup_dir(sandbox.id, "memory") / "memory.limit_in_bytes").read_text().strip() == str(256 << 20)
            assert (cgroup_dir(sandbox.id, "pids") / "pids.max").read_text().strip() == "64"
            [info] = [s for s in await AsyncSandbox.list() if s.id == sandbox.id]
            assert info.labels == {"task": "t-1"}
            assert 590 < sandbox._record.deadline - time.time() <= 600
            assert await proxy_status(sandbox, "denied.pool.test") == "403"
            assert await proxy_status(sandbox, "allowed.pool.test") != "403"  # allowed; it resolves nowhere
            # The pool starts another in its place.
            await eventually(lambda: pool.ready == 1)


async def test_a_claimed_sandboxs_first_command_does_not_compete_with_its_replacements_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The replacement starts a moment after the claim (here, long after), not during it."""
    monkeypatch.setattr("errand.sandbox.pool._REFILL_DELAY", 1.0, raising=False)
    async with await AsyncSandboxPool.start(size=1) as pool:
        sandbox = await pool.claim(network=Network.allow("allowed.pool.test"), env={"CI": "1"})
        async with sandbox:
            starting = len(pool._starting)
            result = await sandbox.run("true")
            assert (starting, result.exit_code) == (0, 0), "the replacement started with the claim"
            await eventually(lambda: pool.ready == 1)
            assert pool.misses == 0


async def test_a_claim_raises_the_memory_limit_above_the_pools() -> None:
    small = Resources(memory="256MiB", disk="128MiB")
    async with await AsyncSandboxPool.start(size=1, resources=small) as pool, \
            await pool.claim(resources=Resources(memory="1GiB", disk="128MiB")) as sandbox:
        limit = (cgroup_dir(sandbox.id, "memory") / "memory.limit_in_bytes").read_text().strip()
        assert limit == str(1 << 30)


async def test_a_claimed_sandbox_without_a_network_reaches_nothing() -> None:
    async with await AsyncSandboxPool.start(size=1) as pool, await pool.claim() as sandbox:
        assert await proxy_status(sandbox, "allowed.pool.test") == "403"


async def test_a_claimed_sandbox_ends_at_its_lifetime() -> None:
    async with await AsyncSandboxPool.start(size=1) as pool:
        sandbox = await pool.claim(timeout=1)
        await asyncio.wait_for(sandbox.wait(), 60)
        assert not sandbox.alive


async def test_an_empty_pool_starts_the_claimed_sandbox_itself() -> None:
    async with await AsyncSandboxPool.start(size=1) as pool:
        first = await pool.claim()
        second = await pool.claim()  # the refill has not started yet: this one is a miss
        async with first, second:
            assert pool.misses == 1
            assert (await second.run("true")).exit_code == 0
            assert first.id != second.id


async def test_close_ends_every_unclaimed_sandbox() -> None:
    pool = await AsyncSandboxPool.start(size=2)
    started = list(pool._ready)
    assert len(started) == 2 and all(sandbox.alive for sandbox in started)
    await pool.close()
    await pool.close()
    assert pool.ready == 0
    assert not any(sandbox.alive for sandbox in started)
    assert not {sandbox.id for sandbox in started} & {s.id for s in await AsyncSandbox.list()}
    with pytest.raises(SandboxError) as caught:
        await pool.claim()
    assert caught.value.code == "pool_closed"


@pytest.mark.parametrize(("kwargs", "code"), [
    ({"mounts": [Mount.copy("/etc", "/tmp/etc")]}, "pool_mounts"),
    ({"resources": Resources(disk="8GiB")}, "pool_mismatch"),
    ({"timeout": -1}, "invalid_timeout"),
    ({"labels": {"Bad Label": "x"}}, "invalid_label"),
])
async def test_a_claim_the_pool_cannot_serve_is_refused_and_takes_nothing(kwargs: dict[str, object],
                                                                          code: str) -> None:
    async with await AsyncSandboxPool.start(size=1) as pool:
        with pytest.raises(ConfigError) as caught:
            await pool.claim(**kwargs)  # type: ignore[arg-type]
        assert caught.value.code == code
        assert pool.ready == 1 and pool.misses == 0


@pytest.mark.parametrize("size", [0, -1, True, 1.5, 1001])
async def test_a_pool_of_a_bad_size_is_refused(size: object) -> None:
    with pytest.raises(ConfigError) as caught:
        await AsyncSandboxPool.start(size=size)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_pool"


@pytest.mark.faults
async def test_a_create_cancelled_while_it_launches_leaves_nothing_behind() -> None:
    # The launcher starts on a thread of its own; a create cancelled meanwhile ends what it started.
    def cgroups() -> set[str]:
        return {path.name for path in Path("/sys/fs/cgroup/pids/errand").glob(f"{_settings.cgroup_scope()}-sb-*")}

    # Sandboxes (and their cgroups) alive before, an earlier test's on this worker, are not this test's.
    before, groups_before = {s.id for s in await AsyncSandbox.list()}, cgroups()
    for delay in (0, 0.001, 0.003, 0.01):
        task = asyncio.ensure_future(AsyncSandbox.create())
        await asyncio.sleep(delay)
        task.cancel()
        try:
            sandbox = await task
        except asyncio.CancelledError:
            continue
        await sandbox.terminate()  # it finished before the cancel landed

    async def nothing_left() -> bool:
        return {s.id for s in await AsyncSandbox.list()} <= before and cgroups() <= groups_before
    await eventually(nothing_left)


async def test_a_claims_labels_and_lifetime_reach_another_process_a_moment_later(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The claim's record is written just after it returns (its first command goes first), by
    itself: not only as the replacement's start writes its own (here, an hour later)."""
    monkeypatch.setattr("errand.sandbox.pool._REFILL_DELAY", 3600.0)
    script = ("import sys; from errand.sandbox._backends.registry import Record; "
              "r = Record.load(sys.argv[1]); print(r.labels.get('task', ''), r.deadline is not None)")

    async def seen_elsewhere(sandbox_id: str) -> str:
        shown = await asyncio.create_subprocess_exec(sys.executable, "-c", script, sandbox_id,
                                                     stdout=asyncio.subprocess.PIPE)
        return (await shown.communicate())[0].decode().strip()

    async with await AsyncSandboxPool.start(size=1) as pool:
        sandbox = await pool.claim(labels={"task": "t-9"}, timeout=600)
        async with sandbox:
            await eventually(lambda: _equal(seen_elsewhere(sandbox.id), "t-9 True"))


async def _equal(answer: Awaitable[str], expected: str) -> bool:
    return await answer == expected


async def test_a_claimed_sandboxs_first_command_goes_over_the_connection_opened_ahead() -> None:
    async with await AsyncSandboxPool.start(size=1) as pool:
        sandbox = await pool.claim(timeout=600)
        async with sandbox:
            assert sandbox._spare is not None
            assert (await sandbox.run("echo", "first")).stdout == "first\n"
            assert sandbox._spare is None
            assert (await sandbox.run("echo", "second")).stdout == "second\n"  # connects anew


async def test_a_claimed_sandbox_killed_from_outside_fails_its_next_command_with_the_reason() -> None:
    async with await AsyncSandboxPool.start(size=1) as pool:
        sandbox = await pool.claim(timeout=600)
        async with sandbox:
            os.kill(sandbox._record.pid, signal.SIGKILL)
            await eventually(lambda: sandbox._dead.is_set())  # its end seen: the connection opened ahead goes
            assert sandbox._spare is None
            with pytest.raises(SandboxError) as caught:
                await sandbox.run("true")
            assert caught.value.code == "sandbox_terminated" and "killed by signal 9" in str(caught.value)
