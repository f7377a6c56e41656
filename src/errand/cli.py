"""errand's command line (filled in by the CLI work)."""

from __future__ import annotations


def main() -> None:
    raise SystemExit("errand: the command line is not built yet")
