"""A repository's environment, read strictly from its ``errand.toml``.

``Environment.load(repo)`` gives the image, the setup/test/lint commands, the
egress allowlist, resource limits and which instruction files the agent reads.
No file means the defaults. Anything unknown or mistyped is a ConfigError
naming the key and the file: a misspelt key must never be silently ignored.

``instructions(repo)`` collects the project instruction files (AGENTS.md and
kin) for the model; ``cache_key(repo)`` is the key a set-up environment's image
layer is cached under, from the setup-relevant config and the lockfiles and
manifests' dependency tables (:mod:`errand.tasks.reuse`), or with ``[setup] key =
"tree"`` the whole tree.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from errand._files import read_inside
from errand.agent.budgets import Budgets
from errand.agent.seam import agent_kind
from errand.errors import ConfigError
from errand.memory.rules import parse_rule, rule_files
from errand.sandbox.config import Resources
from errand.sandbox.image import Image
from errand.sandbox.network import Network
from errand.sandbox.registries import REGISTRY_KINDS, RegistryAccess, host_registries
from errand.tasks.detect import detect
from errand.tasks.reuse import DEPENDENCY_TABLES, KEY_PATTERNS, key_files, key_material

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_INSTRUCTIONS",
    "KEY_PATTERNS",
    "WHOLE_TREE",
    "Environment",
    "Guide",
    "cache_key",
    "egress_summary",
    "instructions",
    "keyed_on",
    "project_guide",
]

CONFIG_FILE = "errand.toml"
DEFAULT_INSTRUCTIONS: tuple[str, ...] = ("AGENTS.md", "CLAUDE.md", ".cursorrules", ".github/copilot-instructions.md")
WHOLE_TREE = "tree"  # [setup] key = "tree": every file of the tree keys the environment (no reuse across commits)
MAX_CONFIG_BYTES = 1024**2
MAX_INSTRUCTION_FILE_BYTES = 32 * 1024
MAX_INSTRUCTIONS_BYTES = 64 * 1024

# table -> its known keys
_SCHEMA: dict[str, tuple[str, ...]] = {
    "image": ("steps",),
    "setup": ("commands", "network", "key", "refresh"),
    "test": ("command",),
    "lint": ("command",),
    "network": ("mode", "domains", "cidrs"),
    "resources": ("cpus", "memory", "pids", "disk", "disk_medium"),
    "agent": ("kind", "instructions", "max_steps", "max_tokens", "max_cost", "max_minutes"),
}
_CACHE_VERSION = "errand-environment-v3"
_NETWORK_KEYS = ("mode", "domains", "cidrs")


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
    # from setup and the project (errand.tasks.reuse.refresh).
    setup_refresh: tuple[str, ...] | None = None
    resources: Resources = field(default_factory=Resources)
    instruction_files: tuple[str, ...] = DEFAULT_INSTRUCTIONS
    budgets: Budgets | None = None  # [agent] max_steps & co; None: the engine's defaults
    agent_kind: str | None = None  # [agent] kind: the agent tasks of this repository get unless told otherwise
    source: Path | None = None  # the errand.toml read, or None for the defaults
    detected: str | None = None  # without errand.toml, what errand.tasks.detect read off the files, and why

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
        return _parse(document, repo, path)


def _parse(document: dict[str, Any], repo: Path, path: Path) -> Environment:
    _known_keys(document, _SCHEMA, path, where="top level", noun="table")
    tables: dict[str, Mapping[str, Any]] = {}
    for name in _SCHEMA:
        if name not in document:
            continue
        table = document[name]
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [{name}] must be a table, not {_type(table)}", code="invalid_config")
        _known_keys(table, {key: () for key in _SCHEMA[name]}, path, where=f"[{name}]", noun="key")
        tables[name] = table
    values: dict[str, Any] = {"source": path}

    image = tables.get("image", {})
    if "steps" in image:
        steps = image["steps"]
        if not isinstance(steps, list) or not all(isinstance(item, dict) for item in steps):
            raise _type_error(path, "image.steps", "a list of one-key tables such as {run = \"...\"}", steps)
        with _context(path, "image.steps"):
            values["image"] = Image.from_steps([_resolve_copy(item, repo, path) for item in steps])

    if "setup" in tables:
        values.update(_setup(tables["setup"], path))
    for name in ("test", "lint"):
        if "command" in tables.get(name, {}):
            values[name] = _command(tables[name]["command"], path, f"{name}.command")

    if "network" in tables:
        values["network"] = _network(tables["network"], path, "network")

    if "resources" in tables:
        resources = tables["resources"]
        if "cpus" in resources and (isinstance(resources["cpus"], bool)
                                    or not isinstance(resources["cpus"], int | float)):
            raise _type_error(path, "resources.cpus", "a number", resources["cpus"])
        if "pids" in resources and (isinstance(resources["pids"], bool) or not isinstance(resources["pids"], int)):
            raise _type_error(path, "resources.pids", "an integer", resources["pids"])
        for key in ("memory", "disk"):
            if key in resources and (isinstance(resources[key], bool)
                                     or not isinstance(resources[key], int | str)):
                raise _type_error(path, f"resources.{key}", "a size such as \"2GiB\" or a byte count",
                                  resources[key])
        if "disk_medium" in resources and not isinstance(resources["disk_medium"], str):
            raise _type_error(path, "resources.disk_medium", "\"auto\", \"memory\" or \"disk\"",
                              resources["disk_medium"])
        with _context(path, "resources"):
            values["resources"] = Resources(**resources)

    if "kind" in tables.get("agent", {}):
        values["agent_kind"] = agent_kind(tables["agent"]["kind"], where=f"{path}: agent.kind")
    if "instructions" in tables.get("agent", {}):
        files = _strings(tables["agent"]["instructions"], path, "agent.instructions", allow_empty=True)
        values["instruction_files"] = tuple(_relative_paths(files, path, "agent.instructions", "a path"))
    limits = {key: tables.get("agent", {})[key] for key in ("max_steps", "max_tokens", "max_cost", "max_minutes")
              if key in tables.get("agent", {})}
    if limits:
        minutes = limits.pop("max_minutes", None)
        if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, int | float)):
            raise _type_error(path, "agent.max_minutes", "a number of minutes", minutes)
        with _context(path, "agent"):
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
    manifests' dependency tables found at the root, so every commit with the same
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
        for name in key_files(repo, env.setup_key or KEY_PATTERNS):
            data = key_material(repo, name, whole=env.setup_key is not None)
            if data is None:  # not a regular file inside the repository: only its presence counts
                digest.update(f"\0lock\0{name}\0unreadable\0".encode())
                continue
            digest.update(f"\0lock\0{name}\0{len(data)}\0".encode())
            digest.update(data)
    return digest.hexdigest()


def keyed_on(repo_dir: Path, environment: Environment) -> list[str]:
    """What of the tree the environment is keyed on, for a person: the files (a manifest's
    dependency tables, where that is all that counts), or ``the whole tree``."""
    if environment.setup_whole_tree:
        return ["the whole tree"]
    repo = Path(repo_dir).resolve()
    patterns = environment.setup_key or KEY_PATTERNS
    return [f"{name}'s dependency tables" if environment.setup_key is None and name in DEPENDENCY_TABLES else name
            for name in key_files(repo, patterns)]


def egress_summary(policy: object) -> str:
    """A policy as events carry it (``Network.to_dict()``), in a few words: ``none``, ``open``,
    or ``only`` and what it allows. Plain text: each face escapes it its own way."""
    if not isinstance(policy, Mapping):
        return "none"
    if policy.get("mode") != "allow":
        return str(policy.get("mode") or "none")
    return "only " + ", ".join(map(str, [*policy.get("domains", []), *policy.get("cidrs", [])]))


# ----------------------------------------------------------------- helpers


def _setup(table: Mapping[str, Any], path: Path) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if "commands" in table:
        values["setup"] = tuple(_strings(table["commands"], path, "setup.commands", allow_empty=True))
    if "network" in table:
        network = table["network"]
        if not isinstance(network, dict):
            raise _type_error(path, "setup.network", "a table such as {registries = [\"pip\"]}", network)
        registries = _strings(network.get("registries", []), path, "setup.network.registries", allow_empty=True)
        unknown = sorted(set(registries) - set(REGISTRY_KINDS))
        if unknown:
            raise ConfigError(f"{path}: setup.network.registries: unknown {', '.join(map(repr, unknown))} "
                              f"(known: {', '.join(REGISTRY_KINDS)})", code="invalid_config")
        policy = {key: value for key, value in network.items() if key != "registries"}
        values["setup_network"] = _network(policy, path, "setup.network", extra=("registries",))
        values["setup_registries"] = tuple(dict.fromkeys(registries))
    if "key" in table:
        if table["key"] == WHOLE_TREE:
            values["setup_whole_tree"] = True
        else:
            if isinstance(table["key"], str):
                raise _type_error(path, "setup.key", f"\"{WHOLE_TREE}\" or a non-empty list of paths or globs",
                                  table["key"])
            globs = _strings(table["key"], path, "setup.key")
            values["setup_key"] = tuple(_relative_paths(globs, path, "setup.key", "a path or glob"))
    if "refresh" in table:
        values["setup_refresh"] = tuple(_strings(table["refresh"], path, "setup.refresh", allow_empty=True))
    return values


def _relative_paths(names: list[str], path: Path, key: str, what: str) -> list[str]:
    for name in names:
        pure = PurePosixPath(name)
        if pure.is_absolute() or ".." in pure.parts or "\0" in name:
            raise ConfigError(f"{path}: {key}: {name!r} must be {what} relative to the repository, without '..'",
                              code="invalid_config")
    return names


def _network(network: Mapping[str, Any], path: Path, where: str, extra: tuple[str, ...] = ()) -> Network:
    _known_keys(network, {key: () for key in (*_NETWORK_KEYS, *extra)}, path, where=f"[{where}]", noun="key")
    if "mode" in network and not isinstance(network["mode"], str):
        raise _type_error(path, f"{where}.mode", "a string", network["mode"])
    policy: dict[str, Any] = {}
    for key in ("domains", "cidrs"):
        if key in network:
            policy[key] = _strings(network[key], path, f"{where}.{key}", allow_empty=True)
    for key, allowed in (("domains", policy.get("domains")), ("cidrs", policy.get("cidrs"))):
        if allowed:  # check each list on its own first, so an error names the key at fault
            with _context(path, f"{where}.{key}"):
                Network.from_dict({key: allowed})
    if "mode" in network:
        policy["mode"] = network["mode"]
    with _context(path, where):
        return Network.from_dict(policy)


def _resolve_copy(item: dict[str, Any], repo: Path, path: Path) -> dict[str, Any]:
    """A copy step with its source made absolute against the repo, and kept inside it."""
    if set(item) != {"copy"} or not isinstance(item["copy"], list) or len(item["copy"]) != 2:
        return item
    source, target = item["copy"]
    if not isinstance(source, str) or not source:
        raise _type_error(path, "image.steps copy source", "a non-empty path string", source)
    resolved = (repo / source).resolve()
    if not resolved.is_relative_to(repo):
        raise ConfigError(f"{path}: image.steps: copy source {source!r} resolves outside the repository",
                          code="outside_repo")
    return {"copy": [str(resolved), target]}


class _context:
    """Re-raise a ConfigError from a value object with the file and key in front, keeping its code."""

    def __init__(self, path: Path, key: str) -> None:
        self.prefix = f"{path}: {key}: "

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _tb: object) -> None:
        if isinstance(error, ConfigError):
            raise ConfigError(self.prefix + error.message, code=error.code) from None


def _known_keys(table: Mapping[str, Any], known: Mapping[str, Any], path: Path, *, where: str, noun: str) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        shown = ", ".join(f"[{key}]" if noun == "table" else repr(key) for key in unknown)
        raise ConfigError(f"{path}: unknown {noun}{'s' if len(unknown) > 1 else ''} {shown} at {where} "
                          f"(known: {', '.join(known)})", code="unknown_key")


def _strings(value: object, path: Path, key: str, *, allow_empty: bool = False) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() for item in value):
        raise _type_error(path, key, "a list of non-empty strings", value)
    if not value and not allow_empty:
        raise _type_error(path, key, "a non-empty list of strings", value)
    return list(value)


def _command(value: object, path: Path, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _type_error(path, key, "a non-empty shell command string", value)
    return value


def _type_error(path: Path, key: str, expected: str, value: object) -> ConfigError:
    return ConfigError(f"{path}: {key} must be {expected}, not {_type(value)} {value!r}", code="invalid_config")


def _type(value: object) -> str:
    return {str: "string", int: "integer", float: "float", bool: "boolean", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)
