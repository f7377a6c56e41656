"""``errand init``: write down the errand.toml errand would detect for a repository, to edit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from errand._text import printable
from errand.cli.tasks import EXIT_USAGE
from errand.tasks.round.defaults import CONFIG_FILE
from errand.tasks.round.detect import detect

__all__ = ["init"]


def init(
    repo: Annotated[Path, typer.Option("--repo", metavar="PATH", help="The repository (default: here).")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Replace an errand.toml that is there.")] = False,
) -> None:
    """Write the errand.toml errand detects from the repository's files (how to set it up and run its
    tests, and why), for you to read, edit and commit. Tasks on a repository without one use the
    same detection by themselves."""
    out, err = Console(highlight=False, soft_wrap=True), Console(stderr=True, highlight=False, soft_wrap=True)
    root = repo.resolve()
    target = root / CONFIG_FILE
    if not root.is_dir():
        err.print(f"error: {printable(str(repo))} is not a directory", style="red", markup=False)
        raise typer.Exit(EXIT_USAGE)
    if os.path.lexists(target) and not force:
        err.print(f"error: {printable(str(target))} is there already; errand uses it as it is "
                  "(--force replaces it with what errand detects)", style="red", markup=False)
        raise typer.Exit(EXIT_USAGE)
    found = detect(root)
    if found is None:
        err.print(f"error: nothing in {printable(str(root))} says how to set it up or test it (no pyproject.toml, "
                  "setup.py, requirements.txt or package.json); write errand.toml yourself: see docs/errand-toml.md",
                  style="red", markup=False)
        raise typer.Exit(EXIT_USAGE)
    if target.is_dir() and not target.is_symlink():
        err.print(f"error: {printable(str(target))} is a directory; errand.toml is a file", style="red", markup=False)
        raise typer.Exit(EXIT_USAGE)
    # A new file renamed over the old name: never written through a link, hard or symbolic, to elsewhere.
    written = root / f".{CONFIG_FILE}.{os.getpid()}.new"
    written.write_text(found.toml)
    os.replace(written, target)
    out.print(f"wrote {printable(str(target))}:\n", markup=False)
    out.print(found.toml, markup=False)
    out.print("Read it, change what is wrong, and commit it: tasks use the errand.toml of their base commit.",
              markup=False)
