"""Sandbox records: written whole for readers in any process, and a save put off (a warm pool's
claim) written before this process reads or saves again, and by itself a moment later."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from errand.sandbox._backends import registry
from errand.sandbox._backends.registry import Record
from polling import until


@pytest.fixture
def record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Record]:
    monkeypatch.setenv("ERRAND_RUNTIME_DIR", str(tmp_path / "run"))
    made = Record(id="r-1", backend="namespace", pid=1, pid_start=1, owner_pid=None, owner_start=None,
                  created_at=0.0, deadline=None, image={}, workdir="/", env={})
    made.directory.mkdir(parents=True)
    made.save()
    yield made
    registry.settle()


def on_disk(record: Record) -> dict[str, object]:
    return json.loads((record.directory / "record.json").read_text())


def test_a_record_read_while_it_is_saved_again_and_again_is_always_whole(record: Record) -> None:
    seen: list[object] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                seen.append(on_disk(record)["labels"])
            except (OSError, ValueError) as error:
                seen.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for n in range(2000):
            record.labels = {"n": "x" * (n % 300)}  # longer and shorter than the last
            record.save()
    finally:
        stop.set()
        reader.join()
    assert seen and all(isinstance(labels, dict) for labels in seen), [s for s in seen if not isinstance(s, dict)][:3]
    assert on_disk(record)["labels"] == {"n": "x" * (1999 % 300)}


async def test_a_save_put_off_is_written_before_this_process_reads_or_saves_the_records_again(
        record: Record) -> None:
    record.labels = {"task": "t-1"}
    record.save_soon(3600)
    assert on_disk(record)["labels"] == {}  # not yet written...
    loaded = Record.load(record.id)  # ...but this process reads what it asked for
    assert loaded is not None and loaded.labels == {"task": "t-1"}
    record.labels = {"task": "t-2"}
    record.save_soon(3600)
    later = Record.load(record.id)
    assert later is not None
    later.labels = {"task": "t-3"}
    later.save()  # the last save called is the one kept
    registry.settle()
    assert on_disk(record)["labels"] == {"task": "t-3"}


async def test_a_save_put_off_lands_by_itself(record: Record) -> None:
    record.labels = {"task": "t-1"}
    record.save_soon(0.01)
    await asyncio.to_thread(until, lambda: on_disk(record)["labels"] == {"task": "t-1"}, "the record written", 60)


async def test_a_save_put_off_for_a_sandbox_whose_files_are_gone_writes_nothing(record: Record) -> None:
    record.labels = {"task": "t-1"}
    record.save_soon(3600)
    shutil.rmtree(record.directory)  # by gc in another process, say
    registry.settle()  # the timer firing after all
    assert not record.directory.exists()


async def test_a_save_put_off_that_cannot_be_written_is_logged_and_fails_nothing_else(
        record: Record, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    other = Record(id="r-2", backend="namespace", pid=1, pid_start=1, owner_pid=None, owner_start=None,
                   created_at=0.0, deadline=None, image={}, workdir="/", env={})
    other.directory.mkdir(parents=True)
    other.save()
    (record.directory / ".record.json").mkdir()  # its partial cannot be written
    record.labels = {"task": "t-1"}
    record.save_soon(3600)
    loaded = Record.load(other.id)  # another sandbox's record is still read...
    assert loaded is not None and loaded.id == other.id
    other.remove_files()  # ...and removed
    assert not other.directory.exists()
    assert "r-1: its record could not be saved" in caplog.text


def test_a_process_that_ends_before_its_loop_turns_again_still_writes_what_it_put_off(record: Record) -> None:
    script = ("import asyncio, sys\n"
              "from errand.sandbox._backends.registry import Record\n"
              "async def claim():\n"
              "    record = Record.load(sys.argv[1])\n"
              "    record.labels = {'task': 't-1'}\n"
              "    record.save_soon(3600)\n"
              "asyncio.run(claim())\n")
    subprocess.run([sys.executable, "-c", script, record.id], check=True)
    assert on_disk(record)["labels"] == {"task": "t-1"}


def test_a_mark_whose_folder_another_end_removes_meanwhile_is_still_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Another sandbox's end (forget_ended) removes the folder of marks when it is empty: once, that
    # fell between mark_ended's mkdir and its write, and the terminate that marked raised before it
    # killed anything.
    monkeypatch.setenv("ERRAND_RUNTIME_DIR", str(tmp_path / "run"))
    write_text = Path.write_text
    removed: list[Path] = []

    def removed_first(path: Path, text: str) -> int:
        if not removed:
            removed.append(path.parent)
            registry.forget_ended("sb-another000")  # the folder is empty: it goes
        return write_text(path, text)

    monkeypatch.setattr(Path, "write_text", removed_first)
    registry.mark_ended("sb-ended00000", "`errand sandbox rm` (pid 42)")
    assert removed and registry.ended_by("sb-ended00000") == "`errand sandbox rm` (pid 42)"
