"""One build step of an image, and the fingerprint its cached layer is found by."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Step"]


@dataclass(frozen=True)
class Step:
    """One build step. ``kind`` is one of: base, debian, config, run, copy, env, workdir."""

    kind: str
    args: tuple[str, ...] = ()
    network: str = ""  # which package registry the step may reach: "", "pip", "npm" or "apt"

    def fingerprint(self) -> str:
        if self.kind == "copy":
            return f"copy:{_tree_digest(Path(self.args[0]))}:{self.args[1]}"
        return f"{self.kind}:{self.network}:" + "\0".join(self.args)

    def describe(self) -> str:
        if self.kind == "run":
            return f"RUN {self.args[0]}"
        return f"{self.kind.upper()} {' '.join(self.args)}".strip()


def _tree_digest(root: Path) -> str:
    """Content hash of a file or tree: names, modes, link targets and bytes."""
    digest = hashlib.sha256()
    paths = [root] if not root.is_dir() or root.is_symlink() else sorted(root.rglob("*"))
    for path in paths:
        relative = path.relative_to(root).as_posix() if path != root else "."
        info = path.lstat()
        digest.update(f"{relative}\0{info.st_mode}\0".encode())
        if path.is_symlink():
            digest.update(os.readlink(path).encode())
        elif path.is_file():
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()
