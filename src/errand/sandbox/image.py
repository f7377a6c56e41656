"""Images: a root step plus build steps, each cached as a layer.

``Image.base().pip_install("pytest").run("mkdir -p /data")`` describes an
image; nothing runs until a sandbox needs it (or ``build()`` is called). Each
step's layer is cached under the hash of its parent's key and the step, so a
rebuild starts from the first step that changed.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from errand._sync import run_sync
from errand.errors import ConfigError
from errand.sandbox._images import builder
from errand.sandbox._images.layers import ImageConfig, LayerStore
from errand.sandbox._images.steps import Step
from errand.sandbox.config import sandbox_path

__all__ = ["Image", "Step"]

LogSink = Callable[[str], None]
_IMAGE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+:=<>!~,\[\]-]*$")
# An npm package pinned to one version: ``name@1.2.3`` or ``@scope/name@1.2.3``.
_NPM_PINNED = re.compile(r"^(?:@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*@\d+\.\d+\.\d+[A-Za-z0-9.+-]*$")


@dataclass(frozen=True, repr=False)
class Image:
    """An immutable image description; every builder method returns a new Image.

    A snapshot has an :attr:`id` (``snap-…``) that :meth:`from_id` turns back into it later,
    in another process too, for as long as errand's home keeps its layers."""

    steps: tuple[Step, ...]
    config: ImageConfig | None = None  # set for snapshots: an already-resolved root

    @property
    def id(self) -> str | None:
        """A snapshot's id, to keep and pass to :meth:`from_id`; None for an image of steps."""
        return self.config.key if self.config is not None else None

    @classmethod
    def from_id(cls, image_id: str) -> Image:
        """The snapshot (or built image) whose :attr:`id` this is, from errand's layer store."""
        config = LayerStore().cached_image(image_id) if _IMAGE_ID.fullmatch(str(image_id)) else None
        if config is None:
            raise ConfigError(f"no image {image_id!r} in this errand home (a snapshot's id, e.g. from "
                              "Image.id; its layers may have been removed)", code="image_not_found")
        return cls.from_config(config)

    def __repr__(self) -> str:
        if self.config is not None:
            return f"Image.from_id({self.config.key!r})"
        shown = [step.describe() for step in self.steps]
        return "Image(" + " → ".join(text if len(text) <= 60 else text[:59] + "…" for text in shown) + ")"

    @classmethod
    def base(cls) -> Image:
        """The host's programs (``/usr`` and kin, read-only) under a synthesized ``/etc``."""
        return cls((Step("base"),))

    @classmethod
    def debian(cls, suite: str = "bookworm") -> Image:
        """A minimal Debian root built with mmdebstrap from the machine's own apt mirror."""
        if not isinstance(suite, str) or not suite.isalnum():
            raise ConfigError(f"not a Debian suite name: {suite!r}", code="invalid_image_step")
        return cls((Step("debian", (suite,)),))

    @classmethod
    def from_config(cls, config: ImageConfig) -> Image:
        return cls((Step("config", (config.key,)),), config)

    @classmethod
    def from_steps(cls, steps: list[dict[str, Any]]) -> Image:
        """An image from data, e.g. errand.toml's ``[[image]]`` tables.

        Each item has exactly one key: ``base``/``debian`` (first item only),
        ``run``, ``pip_install``, ``apt_install``, ``copy`` (``[source, target]``),
        ``env`` (a table) or ``workdir``.
        """
        if not isinstance(steps, list):
            raise ConfigError("image steps must be a list of one-key tables", code="invalid_image_step")
        image = cls.base()
        for index, item in enumerate(steps):
            if not isinstance(item, dict) or len(item) != 1:
                raise ConfigError(f"image step {index + 1} must have exactly one key, got {item!r}",
                                  code="invalid_image_step")
            ((kind, value),) = item.items()
            image = _apply_step(image, index, kind, value)
        return image

    def run(self, *commands: str) -> Image:
        """Run shell commands, each as its own cached layer."""
        image = self
        for command in commands:
            if not isinstance(command, str) or not command.strip():
                raise ConfigError("run() takes non-empty shell command strings", code="invalid_image_step")
            image = image._then(Step("run", (command,)))
        return image

    def pip_install(self, *packages: str) -> Image:
        names = _packages(packages, "pip_install")
        command = ("python3 -m pip install --user --no-warn-script-location --break-system-packages "
                   "--disable-pip-version-check " + " ".join(shlex.quote(p) for p in names))
        return self._then(Step("run", (command,), network="pip"))

    def npm_install(self, *packages: str, prefix: str) -> Image:
        """Install npm packages (pin each: ``name@1.2.3``) under ``prefix`` (its ``bin`` holds their
        commands), reaching only the host's npm registry while the step runs. npm's own cache is
        left out of the layer."""
        names = _packages(packages, "npm_install", _NPM_PINNED)
        target = sandbox_path(prefix, what="npm_install prefix")
        command = (f"npm install --global --prefix {shlex.quote(target)} --no-audit --no-fund --no-update-notifier "
                   "--cache /tmp/errand-npm-cache " + " ".join(shlex.quote(p) for p in names)
                   + " && rm -rf /tmp/errand-npm-cache")
        return self._then(Step("run", (command,), network="npm"))

    def apt_install(self, *packages: str) -> Image:
        names = _packages(packages, "apt_install")
        if self.steps[0].kind == "base":
            raise ConfigError("apt_install needs a Debian root: Image.base() shares the host's read-only "
                              "/usr; start from Image.debian() instead", code="invalid_image_step")
        command = ("apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                   "--no-install-recommends " + " ".join(shlex.quote(p) for p in names)
                   + " && apt-get clean && rm -rf /var/lib/apt/lists/*")
        return self._then(Step("run", (command,), network="apt"))

    def copy(self, source: str | os.PathLike[str], target: str) -> Image:
        path = Path(os.path.abspath(os.fspath(source)))
        if not path.exists():
            raise ConfigError(f"copy source does not exist: {path}", code="missing_copy_source")
        return self._then(Step("copy", (str(path), sandbox_path(target, what="copy target"))))

    def env(self, variables: dict[str, str] | None = None, **more: str) -> Image:
        merged = {**(variables or {}), **more}
        for name, value in merged.items():
            if not name or "=" in name or "\0" in name or not isinstance(value, str) or "\0" in value:
                raise ConfigError(f"bad environment variable {name!r}={value!r}", code="invalid_image_step")
        return self._then(Step("env", tuple(f"{k}={v}" for k, v in sorted(merged.items()))))

    def workdir(self, path: str) -> Image:
        return self._then(Step("workdir", (sandbox_path(path, what="workdir"),)))

    def _then(self, step: Step) -> Image:
        return replace(self, steps=(*self.steps, step))

    def build(self, *, log: LogSink | None = None, store: LayerStore | None = None) -> ImageConfig:
        """Build (or find cached) every layer; stream the build log to ``log``."""
        return run_sync(self.build_async(log=log, store=store))

    async def build_async(self, *, log: LogSink | None = None, store: LayerStore | None = None) -> ImageConfig:
        return await builder.build(self.steps, self.config, log=log, store=store)


def _apply_step(image: Image, index: int, kind: str, value: Any) -> Image:
    if kind in ("base", "debian"):
        if index != 0:
            raise ConfigError(f"{kind} can only be the first image step", code="invalid_image_step")
        return Image.base() if kind == "base" else Image.debian(value if isinstance(value, str) else "bookworm")
    listed = [value] if isinstance(value, str) else value
    if kind == "run":
        return image.run(*listed)
    if kind == "pip_install":
        return image.pip_install(*listed)
    if kind == "apt_install":
        return image.apt_install(*listed)
    if kind == "copy" and isinstance(value, list) and len(value) == 2:
        return image.copy(value[0], value[1])
    if kind == "env" and isinstance(value, dict):
        return image.env(value)
    if kind == "workdir" and isinstance(value, str):
        return image.workdir(value)
    known = "base, debian, run, pip_install, apt_install, copy, env, workdir"
    raise ConfigError(f"image step {index + 1}: unknown step or bad value {kind!r}: {value!r} "
                      f"(steps are: {known})", code="invalid_image_step")


def _packages(packages: tuple[str, ...], what: str, pattern: re.Pattern[str] = _PACKAGE) -> list[str]:
    if not packages:
        raise ConfigError(f"{what}() needs at least one package", code="invalid_image_step")
    for name in packages:
        if not isinstance(name, str) or not pattern.match(name):
            raise ConfigError(f"{what}(): not a package name or requirement: {name!r}",
                              code="invalid_image_step")
    return list(packages)
