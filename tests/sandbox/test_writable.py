"""The disk-backed writable layer (``writable.py``, ``native/disk.c``), as the host sees it."""

from __future__ import annotations

from errand import Resources, Sandbox
from hostfacts import memory_dir

KiB = 1024


def _page_cache(sandbox_id: str) -> int:
    """Bytes of page cache charged to the sandbox's memory cgroup (v1 ``cache``, v2 ``file``)."""
    text = (memory_dir(sandbox_id) / "memory.stat").read_text()
    stat = dict(line.split() for line in text.splitlines())
    return int(stat["cache"] if "cache" in stat else stat["file"])


def test_a_large_sparse_disk_costs_an_idle_sandbox_no_page_cache_for_the_space_it_has_not_used() -> None:
    # 16 GiB is 128 block groups of ext4. Its allocator used to read ahead the bitmaps of all of
    # them on the first write, and build their buddy caches: ~1.5 MiB charged to the sandbox.
    with Sandbox.create(resources=Resources(memory="256MiB", disk="16GiB"), timeout=60) as sb:
        wrote = sb.run("sh", "-c", "mkdir -p /work/a && echo x > /work/a/f && sync && cat /work/a/f")
        assert wrote.stdout == "x\n", wrote
        cache = _page_cache(sb.id)
    assert cache < 512 * KiB, f"{cache // KiB} KiB of page cache for a disk holding one small file"
