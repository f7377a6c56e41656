"""An agent CLI, declared: what :class:`~errand.agent.external.CliAgent` needs to know of one.

An adapter is a short file (see :mod:`errand.agent.claude_code`,
:mod:`errand.agent.codex`, :mod:`errand.agent.gemini_cli`, :mod:`errand.agent.opencode`):
the pinned ``package`` and how it is installed (:meth:`CliAdapter.install`),
the ``binary`` it puts on PATH, the command line of one invocation
(:meth:`CliAdapter.argv`), what it finds in its environment and in its
configuration files (:meth:`CliAdapter.env`, :meth:`CliAdapter.files`: only the
model gateway's base URL and the run's token, never a key), and how each line
of its machine-readable stream reads in errand's terms (:meth:`CliAdapter.translate`,
a pure function of the line and what the adapter kept of the lines before).
"""

from __future__ import annotations

import posixpath
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from errand.models import Usage
from errand.sandbox import Image

__all__ = ["CliAdapter", "ModelAccess", "Said", "SameTools", "ToolAccess", "model_step"]

#: A CLI's tools that are errand's own by another name: {its name: (errand's name, {errand's argument: its})}.
SameTools = Mapping[str, tuple[str, Mapping[str, str]]]

#: Where agent CLIs are installed in their layers (each in its own directory, its commands in bin/).
AGENTS_ROOT = "/opt/errand/agents"


@dataclass(frozen=True)
class ToolAccess:
    """How a CLI in a sandbox reaches errand's tools (:mod:`errand.agent.mcp_server`): the MCP
    server's ``url`` and the run's ``token`` for it (sent as ``Authorization: Bearer``)."""

    url: str
    token: str

    def __repr__(self) -> str:
        return f"ToolAccess(url={self.url!r}, token=…)"


@dataclass(frozen=True)
class ModelAccess:
    """How a CLI in a sandbox reaches its model: ``base_url`` and a per-task ``token`` (never the
    real key), the ``model`` to ask for, and the ``relay``: the host's model gateway the sandbox
    is created with (``AsyncSandbox.create(gateway=…)``), which it reaches at ``base_url``."""

    base_url: str
    token: str
    model: str
    relay: str | None = None  # the gateway's host address the sandbox relays GATEWAY_URL to
    tools: ToolAccess | None = None  # errand's tools over MCP, when the run has them

    def __repr__(self) -> str:  # the token is a credential of the task: never in a log line
        return f"ModelAccess(base_url={self.base_url!r}, model={self.model!r}, token=…)"


@dataclass(frozen=True)
class Said:
    """One thing a CLI's stream said, in errand's terms: ``kind`` is ``model`` (a model call:
    ``data`` has ``content`` and ``tool_calls``, ``usage`` its tokens, ``call_id`` the
    provider's message id), ``tool_call``, ``output``, ``tool_result``, ``session`` (``data``
    has ``id``) or ``result`` (``data`` has ``ok``, ``text``, ``reason``, ``usage``)."""

    kind: str
    data: dict[str, Any] = field(default_factory=dict)
    usage: Usage | None = None


def model_step(call_id: str, content: str, calls: list[dict[str, Any]], usage: Usage | None = None,
               stop: object = None) -> Said:
    """A model call of the stream: what it said, the tool calls it asked for, its tokens."""
    return Said("model", {"call_id": call_id, "content": content, "tool_calls": calls, "stop": stop}, usage)


class CliAdapter(ABC):
    """One agent CLI. One instance reads one run's stream (it may keep what earlier lines said)."""

    kind: ClassVar[str]  # the agent kind tasks name it by
    provider: ClassVar[str]  # whose models it talks to: a provider errand knows ("anthropic", "openai", "gemini")
    protocol: ClassVar[str]  # the wire it speaks, as the model gateway names it ("anthropic", "openai-chat", …)
    package: ClassVar[str]  # the package, pinned: npm's "@scope/name@1.2.3", or pip's "name==1.2.3"
    binary: ClassVar[str]  # the command it installs
    registry: ClassVar[str] = "npm"  # where the package comes from: "npm", or "pip" (a --user install)

    def __init__(self, workdir: str = "/workspace") -> None:
        self.workdir = workdir

    @property
    def prefix(self) -> str:
        """Where its layer installs it (its commands in ``prefix/bin``): pip's user install is the
        sandbox's ``~/.local``, where the host's ``python3`` finds its packages."""
        return "/root/.local" if self.registry == "pip" else f"{AGENTS_ROOT}/{self.kind}"

    def install(self) -> Image:
        """The image of its install on the base image (cached as one layer; the only step that reaches
        a registry)."""
        if self.registry == "pip":
            return Image.base().pip_install(self.package)
        return Image.base().npm_install(self.package, prefix=self.prefix)

    @abstractmethod
    def argv(self, prompt: str, system: str, access: ModelAccess, session: str | None) -> list[str]:
        """One invocation: ``prompt`` (in ``session`` when it goes on), ``system`` added to its own."""

    def env(self, access: ModelAccess) -> dict[str, str]:
        """Its environment beyond the image's."""
        return {}

    def files(self, access: ModelAccess, system: str) -> dict[str, str]:
        """Files it reads its configuration from (absolute paths out of the working copy), written
        into the sandbox before each invocation."""
        return {}

    @abstractmethod
    def translate(self, line: Mapping[str, Any]) -> list[Said]:
        """One line of its stream, in errand's terms."""

    def tool_call(self, call_id: str, name: str, given: object, same: SameTools) -> dict[str, Any]:
        """A tool call of its stream as errand's: by errand's name and arguments where the tool is one of
        errand's by another name (``same``), its paths relative to the workdir; else as it came."""
        arguments = dict(given) if isinstance(given, Mapping) else {}
        if name not in same:
            return {"id": call_id, "name": name, "arguments": arguments}
        ours, renamed = same[name]
        mine = {ours_arg: arguments[theirs] for ours_arg, theirs in renamed.items() if theirs in arguments}
        if isinstance(mine.get("path"), str):
            mine["path"] = self.relative(mine["path"])
        return {"id": call_id, "name": ours, "arguments": mine}

    def relative(self, path: str) -> str:
        """A path it gives (absolute, in the sandbox) as errand's tools name it: relative to the workdir."""
        if not path.startswith("/"):
            return path
        relative = posixpath.relpath(posixpath.normpath(path), self.workdir)
        return path if relative.startswith("..") else relative
