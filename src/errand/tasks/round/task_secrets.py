"""Declared secrets for a task's tools: the operator's, never the repository's.

``$ERRAND_HOME/config.toml`` of the machine that runs tasks (``errand worker``,
``errand serve``, ``errand run``)::

    [secrets]
    NPM_TOKEN = ["npm.internal.example"]
    GH_TOKEN = ["api.github.com", "*.githubusercontent.com"]
    GITLAB_TOKEN = { hosts = ["gitlab.internal.example"], header = "PRIVATE-TOKEN" }

Each name is an environment variable of the process that runs the sandboxes; its
value is read there when a sandbox starts, and becomes a
:class:`~errand.sandbox.Secret` for those hosts: the sandbox holds a placeholder,
the egress proxy swaps the value in for HTTPS to the declared hosts only, in the
one request header the secret names (``Authorization`` unless a table's
``header`` names another).
errand.toml cannot declare a secret: it is the repository's, and would aim the
worker's variable at any host it names.

A secret goes to a sandbox only where both agree: the operator declared it, and
the sandbox's network (``[network]`` of errand.toml for the agent and the checks,
``[setup] network`` for setup) allows every one of its hosts; the operator's
hosts never widen a repository's policy. A secret left out — its hosts not
allowed there, or its variable not set in the worker's environment — is said
with its reason in the task's log (a ``secrets`` event), and the round goes on
without it. A malformed ``[secrets]`` table fails the round with the file's
error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from errand import _settings
from errand.errors import ConfigError
from errand.models.catalog import read_settings
from errand.sandbox import Network, Secret
from errand.sandbox.secret import check_secrets

__all__ = ["Decision", "Declared", "decide", "declared"]

_PLACEHOLDER = "x"  # a stand-in value, to check a declaration without reading the variable


@dataclass(frozen=True)
class Decision:
    """What one sandbox gets of the declared secrets, and what it does not, with why."""

    given: tuple[Secret, ...] = ()
    withheld: tuple[tuple[str, str], ...] = ()  # (name, reason)

    def describe(self, role: str) -> dict[str, Any]:
        """The ``secrets`` event's data: names and hosts only, never a value."""
        return {"role": role, "given": [{"name": s.name, "hosts": list(s.hosts)} for s in self.given],
                "withheld": [{"name": name, "reason": reason} for name, reason in self.withheld]}


@dataclass(frozen=True)
class Declared:
    """One declared secret: the hosts its value may go to and the request header it goes in."""

    hosts: tuple[str, ...]
    header: str = Secret.header


_SHAPE = ("must be a list of hosts, such as [\"api.github.com\"], or a table such as "
          "{ hosts = [\"gitlab.example\"], header = \"PRIVATE-TOKEN\" }; the value itself is read from the "
          "environment variable of that name")


def declared(path: Path | None = None) -> dict[str, Declared]:
    """The ``[secrets]`` table of errand's settings file: each name, its hosts and header, checked."""
    path = Path(path) if path is not None else _settings.config_path()
    document = read_settings(path)
    table = document.get("secrets", {}) if document is not None else {}
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: secrets must be a table: [secrets] NAME = [\"host\", \"*.host\"]",
                          code="invalid_config")
    found: dict[str, Declared] = {}
    for name, value in table.items():
        hosts, header = _entry(value)
        if hosts is None or header is None:
            raise ConfigError(f"{path}: [secrets] {name} {_SHAPE}", code="invalid_config")
        try:
            secret = Secret(name, _PLACEHOLDER, hosts=hosts, header=header)
        except ConfigError as error:
            raise ConfigError(f"{path}: [secrets]: {error.message}", code=error.code) from None
        found[name] = Declared(secret.hosts, secret.header)
    return found


def _entry(value: object) -> tuple[tuple[str, ...] | None, str | None]:
    """A declaration's hosts and header, or None for the part that is not of its shape."""
    header: object = Secret.header
    if isinstance(value, dict):
        unknown = set(value) - {"hosts", "header"}
        header = value.get("header", header) if not unknown else None
        value = value.get("hosts")
    hosts = tuple(value) if isinstance(value, list) and all(isinstance(h, str) for h in value) else None
    return hosts, header if isinstance(header, str) else None


def decide(network: Network, environ: Mapping[str, str] | None = None, *,
           path: Path | None = None) -> Decision:
    """The declared secrets a sandbox under ``network`` gets, their values from ``environ``
    (default: this process's environment), and those it does not, each with its reason."""
    environ = os.environ if environ is None else environ
    given: list[Secret] = []
    withheld: list[tuple[str, str]] = []
    for name, declaration in declared(path).items():
        value = environ.get(name, "")
        if not value:
            withheld.append((name, f"${name} is not set in the worker's environment"))
            continue
        try:
            secret = Secret(name, value, hosts=declaration.hosts, header=declaration.header)
        except ConfigError as error:  # the value's own fault (not printable ASCII): its message names no value
            withheld.append((name, error.message))
            continue
        try:
            check_secrets([secret], network)
        except ConfigError as error:
            withheld.append((name, f"{error.message}: it is given only where the repository's policy allows "
                                   "all its hosts"))
            continue
        given.append(secret)
    return Decision(tuple(given), tuple(withheld))

