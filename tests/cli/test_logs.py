"""``errand logs`` as a person reads it: a command's colours drawn and nothing else obeyed,
output joined into whole lines that say their attempt, and one attempt at a time."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.cli import stop_worker
from engine.harness import make_repo

from .test_tasks import errand

# Colour as pytest --color=yes prints it, a progress line redrawn with CR and erase-line, an OSC 8
# link and a window title (to be dropped), and a last line with no newline before the next event.
COLOURED = (r"printf '\033]0;title\007\033[32m.\033[0m\033[31mF\033[0m [100%%]\n"
            r"\033[1;31m1 failed\033[0m, \033[32m2 passed\033[0m\n"
            r"fetching 10%%\r\033[Kfetching done\n"
            r"\033]8;;http://example.invalid\007see here\033]8;;\007\n"
            r"tail without newline'")
SCRIPT = [
    {"tool_calls": [{"name": "shell", "arguments": {"command": COLOURED}}]},
    {"tool_calls": [{"name": "finish", "arguments": {"summary": "looked", "assumptions": []}}]},
]


@pytest.fixture
def task(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    home = tmp_path / "home"
    repo = make_repo(tmp_path / "project")
    script = tmp_path / "look.json"
    script.write_text(json.dumps(SCRIPT))
    ran = errand(home, "run", "Look at the output", "--repo", str(repo), "--model", f"scripted:{script}",
                 "--attempts", "2", "-f")
    assert ran.returncode == 0, ran.stderr
    [record] = json.loads(errand(home, "ls", "--json").stdout)
    yield home, record["id"]
    stop_worker(home)


def test_piped_logs_are_whole_tagged_lines_without_escapes(task: tuple[Path, str]) -> None:
    home, task_id = task
    logs = errand(home, "logs", task_id).stdout
    assert "\x1b" not in logs and "␛" not in logs
    lines = logs.splitlines()
    output = [line for line in lines if "→" not in line and "\\033" not in line]  # not the command's own line
    assert not any("title" in line or "example.invalid" in line for line in output)
    for attempt in (1, 2):
        assert f"#{attempt} .F [100%]" in lines
        assert f"#{attempt} 1 failed, 2 passed" in lines
        assert f"#{attempt} fetching done" in lines  # the progress line at its last state
        assert f"#{attempt} see here" in lines
        assert f"#{attempt} tail without newline" in lines  # ended by the next event, which keeps its line
    assert not any("newline#" in line or "newline→" in line or "newline ←" in line for line in lines)


def test_one_attempt_at_a_time(task: tuple[Path, str]) -> None:
    home, task_id = task
    second = errand(home, "logs", task_id, "--attempt", "2").stdout
    assert "#2 1 failed, 2 passed" in second.splitlines()
    assert "#1 " not in second
    assert any(line.startswith("── round 1") for line in second.splitlines())  # the task's own lines stay
    refused = errand(home, "logs", task_id, "--attempt", "3")
    assert refused.returncode == 2
    assert "there is no attempt 3" in refused.stderr


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_terminal_draws_the_colours(task: tuple[Path, str], tmp_path: Path) -> None:
    home, task_id = task
    session = f"errand-logs-{uuid.uuid4().hex[:8]}"
    done = tmp_path / "done"
    command = (f"ERRAND_HOME={home} {sys.executable} -m errand logs {task_id} --attempt 1; touch {done}; "
               "sleep 600")
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "60",
                    "env", "TERM=xterm-256color", "COLORTERM=", "bash", "-c", command], check=True)
    try:
        deadline = time.monotonic() + 120
        while not done.exists():
            assert time.monotonic() < deadline, "errand logs did not finish in tmux"
            time.sleep(0.1)
        plain = _capture(session)
        styled = _capture(session, "-e")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    assert "#1 .F [100%]" in plain and "#1 1 failed, 2 passed" in plain
    assert "␛" not in plain
    assert not any("title" in line for line in plain.splitlines() if "\\033" not in line and "→" not in line)
    # What the terminal shows carries the colours: green for the dot, red for the F.
    line = next(line for line in styled.splitlines() if "[100%]" in line)
    assert "\x1b[32m." in line and "\x1b[31mF" in line


def _capture(session: str, *options: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session, "-S", "-200", *options],
                          capture_output=True, text=True, check=True).stdout
