"""A repository's environment, read strictly from its ``errand.toml``.

``Environment.load(repo)`` gives the image, the setup/test/lint commands, the
egress allowlist, resource limits and which instruction files the agent reads.
No file means the defaults. The file is checked against its model
(:mod:`errand.tasks.round.errand_toml`): anything unknown or mistyped is a ConfigError
naming the file and the key, and a misspelt key gets the nearest known one —
a misspelt key must never be silently ignored.

``instructions(repo)`` collects the project instruction files (AGENTS.md and
kin) for the model; ``cache_key(repo)`` is the key a set-up environment's image
layer is cached under, from the setup-relevant config and the lockfiles and
manifests' dependency tables (:mod:`errand.tasks.round.reuse`), or with ``[setup] key =
"tree"`` the whole tree.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from errand._files import feed_inside, read_inside
from errand.agent.budgets import Budgets
from errand.errors import ConfigError
from errand.memory.rules import parse_rule, rule_files
from errand.sandbox.config import Resources
from errand.sandbox.image import Image
from errand.sandbox.network import Network
from errand.sandbox.registries import RegistryAccess, host_registries
from errand.tasks.round.defaults import CONFIG_FILE, DEFAULT_INSTRUCTIONS, WHOLE_TREE
from errand.tasks.round.detect import detect
from errand.tasks.round.reuse import DEPENDENCY_TABLES, KEY_PATTERNS, key_files, key_material, named_files

if TYPE_CHECKING:
    from errand.tasks.round import errand_toml

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_INSTRUCTIONS",
    "KEY_PATTERNS",
    "WHOLE_TREE",
    "Environment",
    "Guide",
    "cache_key",
    "instructions",
    "keyed_on",
    "project_guide",
]

MAX_CONFIG_BYTES = 1024**2
MAX_INSTRUCTION_FILE_BYTES = 32 * 1024
MAX_INSTRUCTIONS_BYTES = 64 * 1024

_CACHE_VERSION = "errand-environment-v3"


@dataclass(frozen=True)
class Environment:
    """What a task's sandbox is built from and what runs in it."""

    image: Image = field(default_factory=Image.base)
    setup: tuple[str, ...] = ()
    test: str | None = None
    lint: str | None = None
    network: Network = field(default_factory=Network.none)
    # Setup's own egress ([setup] network): None means the same policy as the agent's.
    setup_network: Network | None = None
    setup_registries: tuple[str, ...] = ()  # the host's registries setup may reach (pip, npm, apt)
    # [setup] key: the files (globs) setup's cache is keyed on; None: found automatically
    # (lockfiles, manifests' dependency tables), or with setup_whole_tree the whole base tree.
    setup_key: tuple[str, ...] | None = None
    setup_whole_tree: bool = False
    # [setup] refresh: what runs over the cached environment for each new commit; None: derived
    # from setup and the project (errand.tasks.round.reuse.refresh).
    setup_refresh: tuple[str, ...] | None = None
    resources: Resources = field(default_factory=Resources)
    instruction_files: tuple[str, ...] = DEFAULT_INSTRUCTIONS
    budgets: Budgets | None = None  # [agent] max_steps & co; None: the engine's defaults
    agent_kind: str | None = None  # [agent] kind: the agent tasks of this repository get unless told otherwise
    source: Path | None = None  # the errand.toml read, or None for the defaults
    detected: str | None = None  # without errand.toml, what errand.tasks.round.detect read off the files, and why

    @property
    def setup_egress(self) -> Network:
        """The policy setup commands run under (the host's registries added where named)."""
        base = self.network if self.setup_network is None else self.setup_network
        if not self.setup_registries:
            return base
        domains = sorted(set(base.domains) | set(host_registries(self.setup_registries).domains))
        if base.mode == "open":
            return base
        if not domains and not base.cidrs:
            return Network.none()
        return Network.allow(*domains, cidrs=base.cidrs)

    @classmethod
    def load(cls, repo_dir: Path) -> Environment:
        """The environment from ``repo_dir/errand.toml``, or the defaults if there is none."""
        repo = Path(repo_dir).resolve()
        path = repo / CONFIG_FILE
        if not os.path.lexists(path):
            found = detect(repo)
            if found is None:
                return cls()
            return replace(_parse(tomllib.loads(found.toml), repo, path), source=None, detected=found.summary())
        raw = read_inside(repo, CONFIG_FILE, MAX_CONFIG_BYTES)
        if raw is None:
            raise ConfigError(f"{path} is not a regular file inside the repository", code="outside_repo")
        data, truncated = raw
        if truncated:
            raise ConfigError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes", code="invalid_config")
        try:
            document = tomllib.loads(data.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise ConfigError(f"{path}: not UTF-8 text ({error})", code="invalid_toml") from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{path}: malformed TOML: {error}", code="invalid_toml") from None
        except RecursionError:
            raise ConfigError(f"{path}: nested deeper than a TOML reader goes", code="invalid_toml") from None
        return _parse(document, repo, path)


def _parse(document: dict[str, Any], repo: Path, path: Path) -> Environment:
    """The Environment a valid errand.toml describes; the value objects check what the model
    leaves to them (a domain's breadth, a size's unit, an image step's packages)."""
    from errand.tasks.round import errand_toml  # the model is built when a file is read

    config = errand_toml.read(document, path)
    given = config.model_fields_set
    values: dict[str, Any] = {"source": path}
    if "steps" in config.image.model_fields_set:
        steps = [_resolve_copy(step.as_step(), repo, path) for step in config.image.steps]
        with _context(path, "[image] steps: "):
            values["image"] = Image.from_steps(steps)
    if "setup" in given:
        values.update(_setup(config.setup, path))
    values.update({name: table.command for name, table in (("test", config.test), ("lint", config.lint))
                   if table.command is not None})
    if "network" in given:
        values["network"] = _network(config.network, path, "[network]")
    if "resources" in given:
        with _context(path, "[resources] "):  # the value object names the key
            values["resources"] = Resources(**config.resources.model_dump(exclude_unset=True))
    agent = config.agent
    if agent.kind is not None:
        values["agent_kind"] = agent.kind
    if "instructions" in agent.model_fields_set:
        values["instruction_files"] = tuple(agent.instructions)
    limits = agent.model_dump(include={"max_steps", "max_tokens", "max_cost"}, exclude_unset=True)
    if limits or agent.max_minutes is not None:
        minutes = agent.max_minutes
        with _context(path, "[agent] "):
            values["budgets"] = Budgets(**limits, max_seconds=None if minutes is None else minutes * 60)
    return Environment(**values)


@dataclass(frozen=True)
class Guide:
    """The project's instructions as the agent's prompt gives them (``text``), and the files
    it gives whole (``whole``): what memory need not give the agent again."""

    text: str
    whole: tuple[str, ...] = ()


def instructions(repo_dir: Path, environment: Environment | None = None, *,
                 max_file_bytes: int = MAX_INSTRUCTION_FILE_BYTES,
                 max_total_bytes: int = MAX_INSTRUCTIONS_BYTES) -> str:
    """The text of :func:`project_guide`."""
    return project_guide(repo_dir, environment, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes).text


def project_guide(repo_dir: Path, environment: Environment | None = None, *,
                  max_file_bytes: int = MAX_INSTRUCTION_FILE_BYTES,
                  max_total_bytes: int = MAX_INSTRUCTIONS_BYTES) -> Guide:
    """The project's instruction files that exist, in order, each under a heading with its path,
    then the rules that always apply (``.cursor/rules/*.mdc`` with ``alwaysApply: true``).

    A rule file is given without its front matter. Each file is cut at
    ``max_file_bytes`` and the whole at ``max_total_bytes``. A file that is a
    symlink resolving outside the repository (or is not a regular file) is
    skipped, never read.
    """
    repo = Path(repo_dir).resolve()
    files = (environment or Environment.load(repo)).instruction_files
    sections: list[str] = []
    whole: list[str] = []
    used = 0
    for name in [*files, *(rule for rule in rule_files(repo) if rule not in files)]:
        budget = min(max_file_bytes, max_total_bytes - used)
        if budget <= 0:
            break
        read = read_inside(repo, name, budget)
        if read is None:
            continue
        data, truncated = read
        activation, body = parse_rule(data.decode("utf-8", errors="replace"))
        if name not in files and (activation is None or activation.mode != "always"):
            continue  # a rule that applies to some files, or on request: memory gives it then
        text = body.strip("\n").rstrip()
        if truncated:
            text += f"\n\n[… {name} truncated at {budget} bytes]"
        else:
            whole.append(name)
        used += len(data)
        sections.append(f"## {name}{' (a rule that always applies)' if name not in files else ''}\n\n{text}\n")
    return Guide("\n".join(sections), tuple(whole))


def cache_key(repo_dir: Path, environment: Environment | None = None, *, source: str = "",
              tree: str | None = None, registries: RegistryAccess | None = None) -> str:
    """The key a set-up environment (its image layer and what setup wrote into the tree)
    is cached under.

    It covers everything that can change what setup produces: the repository
    (``source``, as the task names it), the image steps (copy steps by their
    content), the setup and refresh commands, the egress policy setup runs under,
    the host's registry settings setup is given (``registries``), and what of the
    tree setup depends on (:func:`keyed_on`): by default the lockfiles and the
    manifests' dependency tables found at the root and the files setup's commands
    name, with what they include, so every commit with the same
    dependencies shares one environment (each gets a refresh over it); with
    ``[setup] key``, the bytes of the files its globs match; with ``[setup] key =
    "tree"``, ``tree``, the base commit's git tree id. The test and lint commands,
    resource limits, instruction files, and comments and formatting in errand.toml
    leave it unchanged.
    """
    repo = Path(repo_dir).resolve()
    env = environment or Environment.load(repo)
    digest = hashlib.sha256()
    config = {
        "version": _CACHE_VERSION,
        "source": source,
        "image": [step.fingerprint() for step in env.image.steps],
        "setup": list(env.setup),
        "refresh": None if env.setup_refresh is None else list(env.setup_refresh),
        "network": env.setup_egress.to_dict(),
        "registries": registries.fingerprint() if registries is not None else None,
        "tree": tree if env.setup_whole_tree else None,
    }
    digest.update(json.dumps(config, sort_keys=True).encode())
    if not env.setup_whole_tree or tree is None:
        for name in _keyed_files(repo, env):
            if not _key_on(digest, repo, name, tables=env.setup_key is None and name in DEPENDENCY_TABLES):
                # not a regular file inside the repository: only its presence counts
                digest.update(os.fsencode(f"\0lock\0{name}\0unreadable\0"))
    return digest.hexdigest()


def _key_on(digest: Any, repo: Path, name: str, *, tables: bool) -> bool:
    """Add ``name`` to ``digest``: a manifest's dependency tables (``tables``), else the file whole,
    a mebibyte at a time (setup may name a vendored archive of gigabytes). False if unreadable."""
    def header(size: int) -> None:
        digest.update(os.fsencode(f"\0lock\0{name}\0{size}\0"))  # a name need not be UTF-8

    if not tables:
        return feed_inside(repo, name, digest.update, header=header) is not None
    data = key_material(repo, name)
    if data is None:
        return False
    header(len(data))
    digest.update(data)
    return True


def keyed_on(repo_dir: Path, environment: Environment) -> list[str]:
    """What of the tree the environment is keyed on, for a person: the files (a manifest's
    dependency tables, where that is all that counts), or ``the whole tree``."""
    if environment.setup_whole_tree:
        return ["the whole tree"]
    repo = Path(repo_dir).resolve()
    return [f"{name}'s dependency tables" if environment.setup_key is None and name in DEPENDENCY_TABLES
            else os.fsencode(name).decode(errors="backslashreplace") for name in _keyed_files(repo, environment)]


def _keyed_files(repo: Path, environment: Environment) -> list[str]:
    """``[setup] key``'s files; by default the lockfiles and manifests found at the root and the
    files setup's commands name (``pip install -r requirements-dev.lock``), with their includes."""
    if environment.setup_key is not None:
        return key_files(repo, environment.setup_key)
    return sorted({*key_files(repo, KEY_PATTERNS), *named_files(repo, environment.setup)})



# ----------------------------------------------------------------- helpers


def _setup(table: errand_toml.SetupTable, path: Path) -> dict[str, Any]:
    given = table.model_fields_set
    values: dict[str, Any] = {}
    if "commands" in given:
        values["setup"] = tuple(table.commands)
    if table.network is not None:
        values["setup_network"] = _network(table.network, path, "[setup] network")
        values["setup_registries"] = tuple(dict.fromkeys(table.network.registries))
    if table.key == WHOLE_TREE:
        values["setup_whole_tree"] = True
    elif table.key is not None:
        values["setup_key"] = tuple(table.key)
    if table.refresh is not None:
        values["setup_refresh"] = tuple(table.refresh)
    return values


def _network(table: errand_toml.NetworkTable, path: Path, where: str) -> Network:
    policy: dict[str, Any] = {}
    for key in ("domains", "cidrs"):
        allowed = getattr(table, key)
        if allowed:  # check each list on its own first, so an error names the key at fault
            with _context(path, f"{where}.{key}: " if " " in where else f"{where} {key}: "):
                Network.from_dict({key: allowed})
            policy[key] = allowed
    if table.mode is not None:
        policy["mode"] = table.mode
    with _context(path, f"{where}: "):
        return Network.from_dict(policy)


def _resolve_copy(item: dict[str, Any], repo: Path, path: Path) -> dict[str, Any]:
    """A copy step with its source made absolute against the repo, and kept inside it."""
    if "copy" not in item:
        return item
    source, target = item["copy"]
    resolved = (repo / source).resolve()
    if not resolved.is_relative_to(repo):
        raise ConfigError(f"{path}: [image] steps: copy source {source!r} resolves outside the repository",
                          code="outside_repo")
    return {"copy": [str(resolved), target]}


class _context:
    """Re-raise a ConfigError from a value object with the file and ``where`` (``[network] domains: ``,
    or ``[resources] `` before a message that names the key) in front, keeping its code."""

    def __init__(self, path: Path, where: str) -> None:
        self.prefix = f"{path}: {where}"

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _tb: object) -> None:
        if isinstance(error, ConfigError):
            raise ConfigError(self.prefix + error.message, code=error.code) from None
