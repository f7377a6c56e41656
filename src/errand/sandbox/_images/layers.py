"""Content-addressed layers on disk, and the resolved form of an image.

A layer is a directory tree in overlayfs's format (whiteouts included). An
image resolves to a stack of layers plus a little configuration. Image build
steps, snapshots and forks all end by committing one new layer here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from errand import _settings
from errand.errors import SandboxError

__all__ = ["ImageConfig", "LayerStore", "copy_owned_tree"]


@dataclass(frozen=True)
class ImageConfig:
    """An image ready to run: layers bottom to top, host binds, env, workdir."""

    key: str
    layers: tuple[str, ...]
    binds: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    workdir: str = "/"
    kind: str = "base"  # "base" (host programs, read-only) or "rootfs" (a full root)
    labels: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def to_fields(self) -> dict[str, Any]:
        return {"key": self.key, "layers": list(self.layers), "binds": [list(b) for b in self.binds],
                "env": [list(e) for e in self.env], "workdir": self.workdir, "kind": self.kind,
                "labels": dict(self.labels)}

    @classmethod
    def from_fields(cls, data: Mapping[str, Any]) -> ImageConfig:
        return cls(data["key"], tuple(data["layers"]), tuple(tuple(b) for b in data["binds"]),
                   tuple(tuple(e) for e in data["env"]), data["workdir"], data["kind"], dict(data["labels"]))


def copy_owned_tree(source: Path, destination: Path, owner: Path, uid: int) -> None:
    """Copy a host tree to ``destination`` and give everything under ``owner`` to the sandbox's
    root (host ``uid``), so the sandbox can change what it was given."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    for command in (["cp", "-a", "--no-target-directory", str(source), str(destination)],
                    ["chown", "-R", "-h", f"{uid}:{uid}", str(owner)]):
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise SandboxError(f"copying {source} failed: {result.stderr.strip()}", code="copy_failed")


class LayerStore:
    """Layers under ``<home>/layers/<id>``; resolved images under ``<home>/images``."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or _settings.home()
        self.layers = self.root / "layers"
        self.images = self.root / "images"

    def path(self, layer_id: str) -> Path:
        return self.layers / layer_id

    def has(self, layer_id: str) -> bool:
        return self.path(layer_id).is_dir()

    def partial(self) -> Path:
        """A fresh directory to fill before ``commit`` (removed by ``gc`` if abandoned)."""
        self.layers.mkdir(parents=True, exist_ok=True)
        # Layers hold files a sandbox chose, owned by sandbox ids: no other host user
        # may reach them (a setuid file there would run as a sandbox id on the host).
        os.chmod(self.layers, 0o700)
        path = self.layers / f".partial-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        path.mkdir(mode=0o755)
        return path

    def commit(self, partial: Path, layer_id: str) -> Path:
        target = self.path(layer_id)
        try:
            os.rename(partial, target)
        except OSError:
            # Someone committed the same content first; theirs is as good as ours.
            if not target.is_dir():
                raise
            shutil.rmtree(partial, ignore_errors=True)
        return target

    def copy_into_layer(self, source: Path, layer_id: str) -> Path:
        """Commit a copy of a sandbox-written tree as a layer, keeping ownership, modes,
        xattrs and whiteouts, but no setuid/setgid bit: inside a sandbox they grant nothing
        (no_new_privs), and on the host they would grant a sandbox's id."""
        partial = self.partial()
        try:
            result = subprocess.run(["cp", "-a", "--no-target-directory", str(source), str(partial)],
                                    capture_output=True, text=True)
            if result.returncode != 0:
                raise SandboxError(f"copying {source} into a layer failed: {result.stderr.strip()}",
                                   code="layer_copy_failed")
            subprocess.run(["find", str(partial), "-type", "f", "-perm", "/6000", "-exec", "chmod", "ug-s", "{}",
                            "+"], check=True, capture_output=True)
            return self.commit(partial, layer_id)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise

    def cached_image(self, key: str) -> ImageConfig | None:
        path = self.images / f"{key}.json"
        try:
            config = ImageConfig.from_fields(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError):
            return None
        return config if all(self.has(layer) for layer in config.layers) else None

    def save_image(self, config: ImageConfig) -> None:
        self.images.mkdir(parents=True, exist_ok=True)
        partial = self.images / f".{config.key}.{uuid.uuid4().hex[:8]}"
        partial.write_text(json.dumps(config.to_fields()))
        os.replace(partial, self.images / f"{config.key}.json")

    def remove_partials(self, running: Callable[[int], bool]) -> int:
        """Remove the partials of processes no longer ``running`` (a pid's); those of one
        still running are builds in progress."""
        if not self.layers.is_dir():
            return 0
        stale = [p for p in self.layers.iterdir()
                 if p.name.startswith(".partial-") and not running(int(p.name.split("-")[1]))]
        for path in stale:
            shutil.rmtree(path, ignore_errors=True)
        return len(stale)

