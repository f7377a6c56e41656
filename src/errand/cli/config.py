"""``errand config``: errand.toml's JSON Schema for editors, and a check of a repository's file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from errand._text import printable
from errand.errors import ErrandError
from errand.tasks.round.defaults import CONFIG_FILE

__all__ = ["config_app"]

config_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                         help="errand.toml: its JSON Schema, and a check of a repository's file.")


@config_app.command("schema")
def schema() -> None:
    """Print errand.toml's JSON Schema, for editors.

    JSON Schema draft 4, as taplo and Even Better TOML read it; docs/errand.schema.json holds the same.
    """
    from errand.tasks.round.errand_toml import schema_text

    sys.stdout.write(schema_text())


@config_app.command("check")
def check(
    path: Annotated[Path | None, typer.Argument(
        metavar="PATH", show_default=False, help="The repository (default: here); the same as --repo.")] = None,
    repo: Annotated[Path | None, typer.Option(
        "--repo", metavar="PATH", show_default=False, help="The repository (default: here).")] = None,
) -> None:
    """Check a repository's errand.toml: the first thing wrong, or ok.

    It reads the file on disk; a task reads the one committed at its base.
    """
    from errand.tasks.round.environment import Environment

    repo = _one_repository(path, repo)
    try:
        environment = Environment.load(repo)
    except ErrandError as error:
        Console(stderr=True).print(f"error: {printable(error.message)}", style="red", markup=False,
                                   highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    if environment.detected is not None:
        print(f"no {CONFIG_FILE} in {repo.resolve()}: a task uses what errand detects ({environment.detected}); "
              "errand init writes it down to edit")
    elif environment.source is None:
        print(f"no {CONFIG_FILE} in {repo.resolve()}: a task gets the defaults")
    else:
        print(f"{environment.source}: ok")


def _one_repository(path: Path | None, repo: Path | None) -> Path:
    """The repository named as PATH or as --repo (both, if they name the same directory); here if neither."""
    if path is not None and repo is not None and path.resolve() != repo.resolve():
        raise typer.BadParameter(f"PATH is {path} but --repo is {repo}: name the repository once")
    return path or repo or Path()
