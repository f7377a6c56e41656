"""A first script against the SDK, written as a Modal or E2B user writes it: a shell string,
a pip install that fails, a snapshot to come back to, ``help()`` on the API."""

from __future__ import annotations

import pydoc
import uuid
from pathlib import Path

import pytest

from errand import Image, ImageBuildError, Sandbox


def test_a_shell_string_has_an_explicit_way_and_a_hint_where_it_fails() -> None:
    with Sandbox.create(timeout=120) as sb:
        listed = sb.shell("ls -la /etc | grep -c hosts")
        assert listed.exit_code == 0 and int(listed.stdout) >= 1
        assert sb.shell("cat", input="piped\n").stdout == "piped\n"
        mistaken = sb.run("ls -la")
        assert mistaken.exit_code == 127
        assert "cannot run ls -la" in mistaken.stderr
        assert "use sandbox.shell('ls -la'), or pass each word as its own argument" in mistaken.stderr
        assert "sandbox.shell" not in sb.run("no-such-program").stderr  # one word: nothing to hint


def test_a_failed_pip_install_says_why_in_its_message(tmp_path: Path) -> None:
    package = f"errand-no-such-package-{uuid.uuid4().hex[:8]}"
    image = Image.base().run(f"/usr/bin/python3 -m pip install --user --break-system-packages --no-index "
                             f"--find-links {tmp_path} {package}")
    with pytest.raises(ImageBuildError) as caught:
        Sandbox.create(image, timeout=120)
    said = str(caught.value)
    assert said.startswith("image step failed with exit code 1: RUN /usr/bin/python3 -m pip install")
    assert f"No matching distribution found for {package}" in said
    assert caught.value.log.count("\n") >= len(said.split(" / "))  # the whole log is still on .log


def test_a_snapshot_has_a_short_id_and_comes_back_from_it() -> None:
    with Sandbox.create(timeout=120, workdir="/tmp") as sb:
        sb.files.write("/tmp/state.txt", b"kept\n")
        snap = sb.snapshot()
    assert snap.id is not None and snap.id.startswith("snap-")
    assert repr(snap) == f"Image.from_id({snap.id!r})"
    assert len(repr(Image.base().pip_install("pytest"))) < 100
    again = Image.from_id(snap.id)
    with Sandbox.create(again, timeout=120) as sb:
        assert sb.files.read("/tmp/state.txt") == b"kept\n"


def test_help_names_the_blocking_types() -> None:
    page = pydoc.render_doc(Sandbox.create, renderer=pydoc.plaintext)
    assert "-> 'Sandbox'" in page and "AsyncSandbox" not in page
    assert "-> 'Process'" in pydoc.render_doc(Sandbox.exec, renderer=pydoc.plaintext)
