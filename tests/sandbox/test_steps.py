"""An image's build step and the fingerprint its cached layer is found by: the same step is the
same layer; any change to what it copies (bytes, names, modes, link targets) is another."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from errand.sandbox._images.steps import Step


def test_a_step_is_fingerprinted_by_its_kind_network_and_arguments() -> None:
    run = Step("run", ("pip install -e .",), network="pip")
    assert run.fingerprint() == Step("run", ("pip install -e .",), network="pip").fingerprint()
    assert run.fingerprint() != Step("run", ("pip install -e .",)).fingerprint()
    assert run.fingerprint() != Step("run", ("pip install -e . ",), network="pip").fingerprint()
    # Arguments are joined by NUL, so a split in another place is another step.
    assert Step("env", ("A", "B=C")).fingerprint() != Step("env", ("A=B", "C")).fingerprint()


def test_a_step_describes_itself_as_a_build_log_line() -> None:
    assert Step("run", ("make test",), network="apt").describe() == "RUN make test"
    assert Step("env", ("PATH=/opt/bin",)).describe() == "ENV PATH=/opt/bin"
    assert Step("base").describe() == "BASE"


def tree(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src/app.py").write_text("print('hi')\n")
    (root / "README.md").write_text("# app\n")
    (root / "link").symlink_to("README.md")
    return root


def relink(link: Path, target: str) -> None:
    link.unlink()
    link.symlink_to(target)


CHANGES: dict[str, Callable[[Path], object]] = {
    "bytes": lambda root: (root / "src/app.py").write_text("print('ho')\n"),
    "a new file": lambda root: (root / "src/new.py").write_text(""),
    "a rename": lambda root: (root / "README.md").rename(root / "READ.md"),
    "a mode": lambda root: os.chmod(root / "src/app.py", 0o755),
    "a link target": lambda root: relink(root / "link", "src"),
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_a_copy_is_fingerprinted_by_what_it_copies(tmp_path: Path, change: str) -> None:
    root = tree(tmp_path / "project")
    copy = Step("copy", (str(root), "/app"))
    before = copy.fingerprint()
    assert before == Step("copy", (str(tree(tmp_path / "twin")), "/app")).fingerprint()  # not where it lies
    assert before != Step("copy", (str(root), "/srv")).fingerprint()
    CHANGES[change](root)
    assert copy.fingerprint() != before


def test_a_copy_of_one_file_is_fingerprinted_by_its_bytes(tmp_path: Path) -> None:
    single = tmp_path / "requirements.txt"
    single.write_text("httpx\n")
    copy = Step("copy", (str(single), "/app/requirements.txt"))
    before = copy.fingerprint()
    single.write_text("httpx==0.28\n")
    assert copy.fingerprint() != before
