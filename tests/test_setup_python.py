"""scripts/setup's interpreter: the distribution's python3 unless PYTHON names another, and a virtualenv
made with another interpreter than the one chosen is made again."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def chosen() -> str:
    """The interpreter setup's rule picks in this environment, as setup names it (its real path)."""
    wanted = os.environ.get("PYTHON") or "/usr/bin/python3"
    return subprocess.run([wanted, "-c", "import os, sys; print(os.path.realpath(sys.executable))"],
                          capture_output=True, text=True, timeout=60, check=True).stdout.strip()


def test_the_suites_virtualenv_is_made_with_the_interpreter_setup_chose() -> None:
    assert (ROOT / ".venv" / ".errand-python").read_text().strip() == chosen()
    assert os.path.realpath(sys._base_executable) == chosen()  # type: ignore[attr-defined]


def _checkout(tmp_path: Path, made_with: str) -> Path:
    """A checkout whose virtualenv is installed and up to date, said to be made with ``made_with``."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    for name in ("scripts/setup", "scripts/pinned.txt", "pyproject.toml"):
        shutil.copy2(ROOT / name, checkout / name)
    subprocess.run([chosen(), "-m", "venv", str(checkout / ".venv")], check=True, timeout=300)
    (checkout / ".venv" / ".errand-python").write_text(made_with + "\n")
    (checkout / ".venv" / ".errand-installed").touch()
    return checkout


def test_a_virtualenv_made_with_the_chosen_interpreter_is_kept(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path, chosen())
    done = subprocess.run([str(checkout / "scripts" / "setup")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "making .venv again" not in done.stderr
    assert (checkout / ".venv" / ".errand-installed").exists()


def test_a_virtualenv_made_with_another_interpreter_is_made_again(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path, "/opt/another/bin/python3.11")
    setup = subprocess.Popen([str(checkout / "scripts" / "setup")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        assert setup.stderr is not None
        assert setup.stderr.readline() == f"errand setup: making .venv again with {chosen()}\n"
    finally:
        os.killpg(setup.pid, signal.SIGKILL)  # it goes on to install errand, which this copy has not
        setup.wait()
