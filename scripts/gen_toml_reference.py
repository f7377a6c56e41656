#!/usr/bin/env python3
"""Write what errand.toml's model (errand.tasks.round.errand_toml) publishes: docs/errand.schema.json and the
reference section of docs/errand-toml.md (between its two reference markers). With --check, write nothing
and exit 1 if either is out of date (tests/tasks/test_errand_toml.py runs the same comparison).

    .venv/bin/python scripts/gen_toml_reference.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from errand.tasks.round.errand_toml import published  # noqa: E402


def main(argv: list[str]) -> int:
    stale = []
    for name, text in published((ROOT / "docs" / "errand-toml.md").read_text()).items():
        path = ROOT / "docs" / name
        if path.read_text() != text:
            stale.append(name)
            if "--check" not in argv:
                path.write_text(text)
    verb = "out of date" if "--check" in argv else "written"
    print(f"{verb}: {', '.join(stale)}" if stale else "up to date")
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
