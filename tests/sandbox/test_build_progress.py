"""The first ``Sandbox.create`` of an image builds it, which can take a minute: a program that
gave no ``log`` sees the build's progress on stderr; a build found in the cache prints nothing,
and one given a ``log`` keeps its lines. Each run is a real Python process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROGRAM = """
import sys
from errand.sandbox import Image, Sandbox
lines = []
sandbox = Sandbox.create(Image.base().run("echo making a layer"), log=lines.append if sys.argv[1] == "log" else None)
print("ran")
sandbox.terminate()
print("\\n".join(lines))
"""


def create(home: Path, mode: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ERRAND_HOME": str(home)}
    return subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, timeout=300,
                          env=env)


def test_the_first_build_shows_its_progress_on_stderr(tmp_path: Path) -> None:
    first = create(tmp_path / "home", "quiet")
    assert first.returncode == 0, first.stderr
    lines = first.stderr.splitlines()
    assert lines[0].startswith("errand image: building an image (the first time only"), first.stderr
    assert "errand image: STEP RUN echo making a layer" in lines and "errand image: making a layer" in lines
    assert lines[-1].startswith("errand image: image built in ") and lines[-1].endswith(" s")

    again = create(tmp_path / "home", "quiet")  # from the cache: nothing to wait for, nothing said
    assert again.returncode == 0 and "errand image:" not in again.stderr, again.stderr

    given = create(tmp_path / "other", "log")  # a caller's own log takes the lines instead
    assert given.returncode == 0 and "errand image:" not in given.stderr, given.stderr
    assert "STEP RUN echo making a layer" in given.stdout
