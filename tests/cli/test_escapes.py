"""What a reviewer's terminal receives from a hostile agent: every field errand prints, under a pty.

One task's scripted agent writes terminal escapes (screen clear, cursor-up +
erase-line, SGR conceal, OSC 8 links, an OSC 52 clipboard write, a one-byte C1
CSI, a CR, BEL, DEL, bidi overrides and a zero-width space) and Rich markup
into everything it controls: its model text, shell commands and their output,
file contents, a new file's name, a renamed file's name, a tool name, a
memory, a question, its summary and assumptions; the repository's errand.toml
and test output carry them too. A second task fails with such a reason. The
real ``errand`` commands then run on a pseudo-terminal, colour on, as a person
runs them; the test reads every byte they write.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time
import tty
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import errand as errand_package
import forkserver
from engine.harness import make_repo
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Task
from errand.tasks.store.tasks import TaskStore
from polling import until

pytestmark = pytest.mark.slow

# No "/", "'" or newline, so it also fits in a file name and inside a shell's single quotes (so its
# markup opens tags without closing them: Rich closes them at the end, and "[/]" would be a directory).
EVIL = ("\x1b[2J\x1b[1A\x1b[2K\x1b[8m\x1b]8;;mailto:x@e.test\x07LINK\x1b]8;;\x07\x1b]52;c;cHduZWQ=\x07"
        "\x9b31m\u202eRLO\u2066LRI\u200bZW\r\x7f[link=mailto:x@e.test]MARKUP[bold red]FAKE:warning:")
# How errand shows it: control pictures for C0 and DEL, <U+XXXX> for the rest, markup and emoji codes as typed.
SEEN = ("␛[2J␛[1A␛[2K␛[8m␛]8;;mailto:x@e.test␇LINK␛]8;;␇␛]52;c;cHduZWQ=␇"
        "<U+009B>31m<U+202E>RLO<U+2066>LRI<U+200B>ZW␍␡[link=mailto:x@e.test]MARKUP[bold red]FAKE:warning:")
SGR = re.compile(r"\x1b\[[0-9;]*m")
COLUMNS = 600


def _toml_string(text: str) -> str:
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in text) + '"'


TOML = f"[test]\ncommand = {_toml_string('python3 test_calc.py  # TOMLCMD' + EVIL)}\n"
TEST_CALC = ("from calc import add\n\nassert add(2, 3) == 5, f'add(2, 3) gave {add(2, 3)}'\n"
             f"print('1 passed in 0.01s')\nprint({('TESTOUT' + EVIL)!r})\n")


def _call(name: str, **arguments: object) -> dict[str, object]:
    return {"name": name, "arguments": arguments}


HOSTILE = [
    {"content": "MODELTEXT" + EVIL,
     "tool_calls": [_call("shell", command=f"printf '%s\\n' 'OUTPUT{EVIL}' # CMD{EVIL}")]},
    {"tool_calls": [_call("shell", command=f"printf '%s\\n' 'FAILOUT{EVIL}'; exit 3 # FAILCMD{EVIL}")]},
    {"tool_calls": [_call("write_file", path=f"pkg/NEW{EVIL}.py",
                          content=f"CONTENT = 1  # FILECONTENT{EVIL}\nLONG = 1{' ' * COLUMNS}; beyond()\n")]},
    {"tool_calls": [_call("shell", command=f"mv pkg/old.py 'pkg/RENAMED{EVIL}.py'")]},
    {"tool_calls": [_call("edit_file", path="calc.py", old="return a - b", new="return a + b")]},
    {"tool_calls": [_call("edit_file", path="NOTES.md", old="notes", new="notes EDIT" + EVIL)]},
    {"tool_calls": [_call("TOOLNAME" + EVIL)]},
    {"tool_calls": [_call("remember", text="MEMORY" + EVIL)]},
    {"tool_calls": [_call("ask_user", question="QUESTION" + EVIL)]},
    {"tool_calls": [_call("finish", summary=f"SUMMARY{EVIL}\nsecond line", assumptions=["ASSUMED" + EVIL])]},
]
NO_CHANGE = [{"tool_calls": [_call("finish", summary="REASON" + EVIL, assumptions=[])]}]


@dataclass(frozen=True)
class Session:
    home: Path
    repo: Path
    hostile: str  # the task id
    asked: str  # `errand show` while the hostile task waited on its question

    def terminal(self, *args: str) -> str:
        return on_terminal(self.home, *args, cwd=self.repo)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ERRAND_DATABASE_URL", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    # The errand under test, whatever directory a command runs in.
    source = str(Path(errand_package.__file__).parents[1])
    return {**env, "ERRAND_HOME": str(home), "TERM": "xterm-256color", "COLUMNS": str(COLUMNS),
            "PYTHONPATH": os.pathsep.join([source, *filter(None, [env.get("PYTHONPATH")])])}


def on_terminal(home: Path, *args: str, cwd: Path | None = None) -> str:
    """Every byte ``errand ARGS`` writes to a pseudo-terminal (stdout and stderr both), as text."""
    master, slave = os.openpty()
    tty.setraw(slave)  # no output processing: each byte read is a byte errand wrote
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, COLUMNS, 0, 0))
    process = forkserver.start([*args], stdin=slave, stdout=slave, stderr=slave, env=_env(home), cwd=cwd)
    os.close(slave)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 180)
            if not ready:
                process.kill()
                raise AssertionError(f"errand {args} wrote nothing for 180 s")
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the last writer has closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        code = process.wait(timeout=60)
    output = b"".join(chunks).decode()
    assert code == 0, (args, output)
    return output


def errand(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    ran = forkserver.run([*args], timeout=180, env=_env(home))
    assert ran.returncode == 0, (args, ran.stderr)
    return ran


def _git_text(repo: Path, *args: str) -> str:
    """git's output exactly (harness.git reads text mode, which turns a CR into a newline)."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout.decode()


def submit(home: Path, repo: Path, script: list[dict[str, object]], instruction: str) -> str:
    """``errand run`` a task whose model replays ``script``; its id."""
    path = repo.parent / f"script-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(script))
    on_terminal(home, "run", instruction, "--repo", str(repo), "--model", f"scripted:{path}", "--no-worker")
    newest = json.loads(errand(home, "ls", "--json").stdout)[0]
    assert newest["instruction"] == instruction
    return str(newest["id"])


def wait_for(home: Path, task_id: str, *states: TaskState) -> Task:
    with TaskStore.open(f"sqlite:///{home / 'errand.db'}") as store:
        seen: list[Task] = []

        def reached() -> Task | None:
            seen.append(task := store.get_task(task_id))
            return task if task.state in states else None

        try:
            return until(reached, f"{task_id} to be one of {states}", 180)
        except AssertionError as error:
            raise AssertionError(f"{error}; it is {seen[-1].state}") from None


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    root = tmp_path_factory.mktemp("escapes")
    home = root / "home"
    home.mkdir()
    repo = make_repo(root / "project", toml=TOML, files={"test_calc.py": TEST_CALC, "NOTES.md": "notes\n",
                                                          "pkg/__init__.py": "", "pkg/old.py": "VALUE = 1\n"})
    worker = forkserver.start(["worker"], env=_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        task_id = submit(home, repo, HOSTILE, "Fix add()")
        wait_for(home, task_id, TaskState.NEEDS_INPUT)
        asked = on_terminal(home, "show", task_id)
        errand(home, "answer", task_id, "ANSWER" + EVIL)
        wait_for(home, task_id, TaskState.READY_FOR_REVIEW)
        yield Session(home, repo, task_id, asked)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)


def unsafe(output: str) -> list[str]:
    """What in ``output`` a terminal would act on, besides errand's own colours (SGR)."""
    rest = SGR.sub("", output)
    return sorted({repr(c) for c in rest if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F
                   or unicodedata.category(c) in ("Cf", "Zl", "Zp")})


def visible(output: str) -> str:
    return SGR.sub("", output)


def assert_safe(output: str, *fields: str, coloured: bool = True) -> None:
    assert unsafe(output) == [], output
    assert "\x1b[8m" not in output  # the agent's conceal: errand never hides text
    if coloured:
        assert SGR.search(output), "errand's own colours are missing"
    text = visible(output)
    for field in fields:
        assert field + SEEN in text, (field, text)


def test_show_while_the_agent_asks(session: Session) -> None:
    assert_safe(session.asked, "QUESTION")


def test_show_of_the_result(session: Session) -> None:
    output = session.terminal("show", session.hostile)
    assert_safe(output, "SUMMARY", "ASSUMED", "NEW", "RENAMED", "FAILCMD", "TOMLCMD")
    # The summary's second line stays inside the summary, not at the start of a line of its own.
    assert "\n           second line" in visible(output)


def test_diff_of_the_result(session: Session) -> None:
    output = session.terminal("diff", session.hostile)
    assert_safe(output, "FILECONTENT", "EDIT")
    text = visible(output)
    assert "new file mode" in text and "rename to" in text
    assert "beyond()" in text  # a line wider than the terminal is wrapped, not cut at its edge


def test_diff_stat_names(session: Session) -> None:
    assert_safe(session.terminal("diff", "--stat", session.hostile), "NEW", "RENAMED")


# A command's output (OUTPUT, FAILOUT, TESTOUT) is shown as a terminal shows it: its colours drawn, every
# other escape dropped (the erase-line wipes the marker, the CR returns to the line's start), and what is
# left shown, never obeyed: DEL as its picture, the markup as typed.
AS_A_TERMINAL_SHOWS_IT = "␡[link=mailto:x@e.test]MARKUP[bold red]FAKE:warning:"


def test_logs(session: Session) -> None:
    output = session.terminal("logs", session.hostile)
    assert_safe(output, "MODELTEXT", "CMD", "FAILCMD", "FAILOUT", "TOOLNAME", "QUESTION", "ANSWER",
                "SUMMARY", "TOMLCMD")
    shown_output = [line for line in visible(output).splitlines() if line.strip() == AS_A_TERMINAL_SHOWS_IT]
    assert len(shown_output) == 3, visible(output)


def test_a_failure_reason(session: Session) -> None:
    failing = submit(session.home, session.repo, NO_CHANGE, "Change nothing")
    wait_for(session.home, failing, TaskState.FAILED)
    assert_safe(session.terminal("logs", failing), "REASON")
    assert_safe(session.terminal("show", failing), "REASON")


def test_memory_commands(session: Session) -> None:
    listed = session.terminal("memory", "ls", "--repo", str(session.repo))
    assert_safe(listed, "MEMORY", coloured=False)
    memories = json.loads(errand(session.home, "memory", "ls", "--repo", str(session.repo), "--json").stdout)
    [memory] = [m for m in memories if m["text"].startswith("MEMORY")]
    assert memory["text"] == "MEMORY" + EVIL  # stored exactly; only its showing is made safe
    assert_safe(session.terminal("memory", "show", str(memory["id"])), "MEMORY", coloured=False)
    assert_safe(session.terminal("memory", "approve", str(memory["id"])), "MEMORY", coloured=False)
    assert_safe(session.terminal("memory", "search", "MEMORY", "--repo", str(session.repo)), "MEMORY",
                coloured=False)


def test_json_stays_exact(session: Session) -> None:
    output = session.terminal("show", session.hostile, "--json")
    assert unsafe(output) == []  # JSON escapes control characters itself
    shown = json.loads(output)
    [run] = shown["runs"]
    assert run["result"]["summary"] == f"SUMMARY{EVIL}\nsecond line"
    assert run["result"]["assumptions"] == ["ASSUMED" + EVIL]
    events = [json.loads(line) for line in session.terminal("logs", session.hostile, "--json").splitlines()]
    assert {"id", "task_id", "run_id", "seq", "time", "kind", "data"} == set(events[0])
    assert any(e["kind"] == "output" and e["data"]["text"] == f"OUTPUT{EVIL}\n" for e in events)


def test_accept_makes_a_commit_message_safe_for_git_log(session: Session) -> None:
    assert_safe(session.terminal("accept", session.hostile, "--yes"))
    branch = json.loads(errand(session.home, "show", session.hostile, "--json").stdout)["branch"]
    message = _git_text(session.repo, "cat-file", "commit", branch).split("\n\n", 1)[1]
    assert unsafe(message) == [] and "\n\nSUMMARY" + SEEN in message
    # The files are committed exactly as the agent wrote them: only what is shown is made safe.
    assert _git_text(session.repo, "show", f"{branch}:NOTES.md") == f"notes EDIT{EVIL}\n"
    assert_safe(session.terminal("logs", session.hostile))
