"""scripts/setup's interpreter: $PYTHON when set; else the one .venv was made with while it runs; else
the distribution's python3 when it is 3.11 or newer. A virtualenv made with another is made again."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = "import os, sys; print(os.path.realpath(sys._base_executable))"
WITHOUT_PYTHON = {key: value for key, value in os.environ.items() if key != "PYTHON"}


def base_of(python: str) -> str | None:
    """The interpreter a virtualenv made with ``python`` is made from; None when it is older than 3.11."""
    try:
        ran = subprocess.run([python, "-c", "import sys; assert sys.version_info >= (3, 11); " + BASE],
                             capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    return ran.stdout.strip() if ran.returncode == 0 else None


def default() -> str:
    """Setup's choice for a checkout without a virtualenv and without $PYTHON."""
    chosen = base_of("/usr/bin/python3") or base_of("python3")
    assert chosen is not None
    return chosen


def test_the_suites_virtualenv_names_the_interpreter_it_was_made_with() -> None:
    assert (ROOT / ".venv" / ".errand-python").read_text().strip() == os.path.realpath(
        sys._base_executable)  # type: ignore[attr-defined]


def _checkout(tmp_path: Path, made_with: str) -> Path:
    """A checkout whose virtualenv (made with the default) is installed and up to date, its marker
    saying it was made with ``made_with``."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    for name in ("scripts/setup", "scripts/pinned.txt", "pyproject.toml"):
        shutil.copy2(ROOT / name, checkout / name)
    subprocess.run([default(), "-m", "venv", str(checkout / ".venv")], check=True, timeout=300)
    (checkout / ".venv" / ".errand-python").write_text(made_with + "\n")
    (checkout / ".venv" / ".errand-installed").touch()
    return checkout


def test_a_virtualenv_made_with_the_interpreter_it_names_is_kept(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path, default())
    done = subprocess.run([str(checkout / "scripts" / "setup")], capture_output=True, text=True, timeout=300,
                          env=WITHOUT_PYTHON)
    assert done.returncode == 0, done.stderr
    assert "making .venv again" not in done.stderr
    assert (checkout / ".venv" / ".errand-installed").exists()


def test_a_virtualenv_whose_interpreter_is_gone_is_made_again_with_the_default(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path, "/opt/another/bin/python3.11")
    setup = subprocess.Popen([str(checkout / "scripts" / "setup")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, start_new_session=True, env=WITHOUT_PYTHON)
    try:
        assert setup.stderr is not None
        assert setup.stderr.readline() == f"errand setup: making .venv again with {default()}\n"
    finally:
        os.killpg(setup.pid, signal.SIGKILL)  # it goes on to install errand, which this copy has not
        setup.wait()


def test_a_python_that_does_not_run_is_named_and_nothing_changes(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path, default())
    done = subprocess.run([str(checkout / "scripts" / "setup")], capture_output=True, text=True, timeout=300,
                          env={**WITHOUT_PYTHON, "PYTHON": "/nonexistent/python3"})
    assert done.returncode == 1
    assert done.stderr.startswith("errand setup: /nonexistent/python3 does not run: "), done.stderr
    assert (checkout / ".venv" / ".errand-python").read_text() == default() + "\n"
