"""Values both errand.toml's model (:mod:`~errand.tasks.round.errand_toml`) and the
environment read from it need, kept apart so a process that only lists tasks does not build
the model (pydantic reads each field's docstring from the source as the classes are made)."""

from __future__ import annotations

__all__ = ["CONFIG_FILE", "DEFAULT_INSTRUCTIONS", "WHOLE_TREE"]

#: The file a repository describes its environment in.
CONFIG_FILE = "errand.toml"

#: ``[setup] key = "tree"``: the environment keyed on the whole base tree.
WHOLE_TREE = "tree"
#: The files read for a project's instructions when errand.toml names none.
DEFAULT_INSTRUCTIONS: tuple[str, ...] = ("AGENTS.md", "CLAUDE.md", ".cursorrules", ".github/copilot-instructions.md")
