"""The token search the forge tests end with: it reads what a file holds, holes skipped."""

from __future__ import annotations

import base64
from pathlib import Path

from .conftest import files_holding

TOKEN = "ghp_searchedfor"


def test_a_token_past_a_hole_or_in_a_header_is_found_and_nothing_else(tmp_path: Path) -> None:
    sparse = tmp_path / "disk.img"
    with sparse.open("wb") as handle:
        handle.write(b"start")
        handle.seek(1 << 30)  # a 1 GiB hole: read as zeros, it would take seconds
        handle.write(b"..." + TOKEN.encode() + b"...")
        handle.truncate(4 << 30)
    header = tmp_path / "nested" / "config"
    header.parent.mkdir()
    header.write_bytes(b"extraheader = AUTHORIZATION: basic "
                       + base64.b64encode(f"x-access-token:{TOKEN}".encode()))
    (tmp_path / "clean").write_bytes(b"nothing here" * 1000)
    (tmp_path / "empty").write_bytes(b"")
    hole_only = tmp_path / "hole-only"
    with hole_only.open("wb") as handle:
        handle.truncate(1 << 30)
    (tmp_path / "link").symlink_to(sparse)

    assert sorted(files_holding(tmp_path, TOKEN)) == [str(sparse), str(header)]
    assert files_holding(tmp_path, "ghp_elsewhere") == []
