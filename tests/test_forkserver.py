"""tests/forkserver.py: an errand command forked from a server is the command as a new process runs it."""

from __future__ import annotations

import ast
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

import forkserver
from errand import __version__
from polling import until

SOURCE = Path(__file__).parent.parent / "src" / "errand"


def test_the_installed_errand_command_runs() -> None:
    # The one command the suite runs through the console script people run; every other goes through
    # the fork server, which runs errand.__main__.main as the console script does.
    script = Path(sys.executable).with_name("errand")
    ran = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=120)
    assert (ran.returncode, ran.stdout) == (0, f"errand {__version__}\n")


def test_a_forked_command_gets_the_arguments_environment_and_directory_it_is_given(tmp_path: Path) -> None:
    (tmp_path / "errand.toml").write_text("[setup]\nnosuch = 1\n")
    checked = forkserver.run(["config", "check"], cwd=tmp_path)  # "here" is the test's directory
    assert checked.returncode == 2
    assert f"{tmp_path / 'errand.toml'}: unknown key [setup] nosuch" in checked.stderr
    home = tmp_path / "home"
    listed = forkserver.run(["ls", "--json"], env={**os.environ, "ERRAND_HOME": str(home)})
    assert (listed.returncode, listed.stdout.strip()) == (0, "[]"), listed.stderr
    assert (home / "errand.db").exists()  # the test's ERRAND_HOME, not the server's
    assert forkserver._server is not None and forkserver._server.serves(os.environ)  # forked, not started anew


def test_a_forked_command_exits_as_the_command_does_and_its_output_is_its_own() -> None:
    mistyped = forkserver.run(["memry"])
    assert mistyped.returncode == 2
    assert "No such command 'memry'" in mistyped.stderr and mistyped.stdout == ""
    version = forkserver.run(["--version"], input="x" * 300_000)  # more than a pipe holds, and never read
    assert (version.returncode, version.stdout, version.stderr) == (0, f"errand {__version__}\n", "")


def test_a_command_past_its_timeout_is_killed_as_subprocess_run_kills_it(tmp_path: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        forkserver.run(["sandbox", "exec", "sb-0000000000", "--", "true"], input=None, timeout=0.001)


def test_an_environment_with_other_interpreter_settings_gets_an_interpreter_of_its_own(tmp_path: Path) -> None:
    # PYTHONPATH is read when Python starts: a forked child would not see it, so the command is started anew.
    (tmp_path / "sitecustomize.py").write_text("import sys; sys.stderr.write('site of the test\\n')\n")
    ran = forkserver.run(["--version"], env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert ran.returncode == 0 and "site of the test" in ran.stderr


def _reads_the_environment(tree: ast.Module) -> list[str]:
    """Module-level reads of the environment, the home or the user: a forked command would see the
    server's where a new process sees its own."""
    inside = {id(node) for function in ast.walk(tree)
              if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
              for node in ast.walk(function)}
    return [f"line {node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
            if id(node) not in inside and isinstance(node, ast.Attribute)
            and node.attr in {"environ", "getenv", "environb", "home", "cwd", "getcwd", "getuid", "geteuid"}]


def test_no_errand_module_reads_the_environment_when_it_is_imported() -> None:
    found = {str(path.relative_to(SOURCE)): reads for path in sorted(SOURCE.rglob("*.py"))
             if (reads := _reads_the_environment(ast.parse(path.read_text())))}
    assert found == {}


def test_the_check_finds_a_module_level_read() -> None:
    assert _reads_the_environment(ast.parse("import os\nHOME = os.environ.get('HOME')\n"))
    assert not _reads_the_environment(ast.parse("import os\ndef home():\n    return os.environ.get('HOME')\n"))


def test_a_started_command_serves_until_it_is_signalled_and_its_status_is_read(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "serve.log"
    with open(log, "wb") as output:
        served = forkserver.start(["serve", "--no-engine", "--port", str(port)], stdout=output, stderr=output,
                                  env={**os.environ, "ERRAND_HOME": str(tmp_path / "home")})
    assert isinstance(served, forkserver.Forked)
    try:
        until(lambda: _answers(port), "errand serve to answer")
        served.send_signal(signal.SIGSTOP)  # stopped is not ended
        assert served.poll() is None
        served.send_signal(signal.SIGCONT)
        served.terminate()
        assert served.wait(60) in (0, -signal.SIGTERM), log.read_text()
        assert served.poll() == served.returncode
        served.kill()  # an ended command's pid may be another process's now: nothing is sent
    finally:
        served.kill()


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/static/style.css", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_a_command_asked_for_badly_is_refused_and_the_server_serves_the_next() -> None:
    with pytest.raises(OSError):  # a closed descriptor, as subprocess refuses it
        descriptor = os.open(os.devnull, os.O_RDONLY)
        os.close(descriptor)
        forkserver.start(["--version"], stdin=descriptor)
    with pytest.raises(FileNotFoundError):
        forkserver.start(["--version"], cwd="/nonexistent/directory")
    merged = forkserver.run(["memry"], timeout=60)  # the server still serves
    assert merged.returncode == 2


def test_the_error_stream_can_be_the_output_stream_as_in_subprocess(tmp_path: Path) -> None:
    process = forkserver.start(["memry"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 2 and err is None
    assert out is not None and "No such command 'memry'" in out


def test_a_command_is_killed_through_its_pidfd_even_once_the_server_is_gone(tmp_path: Path) -> None:
    served = forkserver.start(["serve", "--no-engine", "--port", "0"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, "ERRAND_HOME": str(tmp_path / "home")})
    assert isinstance(served, forkserver.Forked) and forkserver._server is not None
    forkserver._server.process.kill()
    forkserver._server.process.wait()
    served.kill()
    until(lambda: not Path(f"/proc/{served.pid}").exists() or "Z" in _state(served.pid), "the command to end")
    assert forkserver.run(["memry"], timeout=60).returncode == 2  # a new server serves the next


def test_two_threads_waiting_on_one_command_both_get_its_status() -> None:
    for _ in range(10):
        process = forkserver.start(["--version"], stdout=subprocess.DEVNULL)
        waited: list[int] = []
        thread = threading.Thread(target=lambda process=process, waited=waited: waited.append(process.wait(60)))
        thread.start()
        while process.poll() is None:
            pass
        thread.join()
        assert waited == [0] and process.returncode == 0


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
