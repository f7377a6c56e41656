"""Asking a person to confirm a risky or final step: accept a doubtful diff, cancel a task, end
a sandbox, delete a memory.

On a terminal the command asks (``[y/N]``, no by default). Off a terminal there is no one to
ask, so it refuses with one clear line unless ``--yes`` said so beforehand: a script that
cancels or accepts says it means to.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated

import typer
from rich.console import Console

from errand._text import printable

__all__ = ["EXIT_NOT_CONFIRMED", "Yes", "confirm"]

EXIT_NOT_CONFIRMED = 1
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do it without asking (needed off a terminal).")]


def confirm(action: str, reasons: Sequence[str] = (), *, yes: bool, flag: str = "--yes") -> None:
    """Return when the person confirmed ``action`` ("cancel t-1234", shown with ``reasons``), or
    ``yes`` did beforehand; else say nothing changed and exit."""
    if yes:
        return
    err = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)
    for reason in reasons:
        err.print(f"  • {printable(reason, lines=False)}", style="yellow", markup=False)
    # Both, so output piped elsewhere (`--json | jq`, a test's capture) never waits on a hidden question.
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        err.print(f"error: {printable(action, lines=False)} needs a confirm, and there is no terminal to ask on: "
                  f"pass {flag} to do it anyway; nothing changed", style="red", markup=False)
        raise typer.Exit(EXIT_NOT_CONFIRMED)
    question = printable(action, lines=False)
    if not typer.confirm(question[:1].upper() + question[1:] + "?", default=False, err=True):
        err.print("nothing changed", style="dim", markup=False)
        raise typer.Exit(EXIT_NOT_CONFIRMED)
