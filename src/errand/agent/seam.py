"""The one seam every agent of a task sits behind: errand's own loop, or an agent CLI.

The round (:mod:`errand.tasks.round.order`) starts an agent with the task's prompt and
waits for its :class:`~errand.agent.AgentResult`; while it works the agent
reports each step through the event handler the round gives it (``model``,
``tool_call``, ``output``, ``tool_result``, ``exit``), so logs, budgets, stuck
detection, progress and cost read the same whichever agent ran. Nothing after
the agent — evidence, ranking, review, memory, the forge — sees which one it was::

    TaskAgent                  kind
    ├── errand.agent.Agent             "errand"       errand's loop on the host, its tools in the sandbox
    └── errand.agent.external.CliAgent                an agent CLI in the sandbox, its key outside it
        ├── claude_code.ClaudeCode     "claude-code"
        ├── codex.Codex                "codex"
        ├── gemini_cli.GeminiCli       "gemini-cli"
        ├── opencode.OpenCode          "opencode"
        ├── mini_swe_agent.MiniSweAgent "mini-swe-agent"
        └── aider.Aider                "aider"

A task's kind is chosen at submission (``errand run --agent``, else ``[agent] kind``
in the repository's errand.toml, else ``agent`` in errand's config.toml, else
``errand``) and stored with the task.
"""

from __future__ import annotations

from typing import Any, Protocol

from errand.agent.aider import Aider
from errand.agent.budgets import Spent
from errand.agent.claude_code import ClaudeCode
from errand.agent.cli import CliAdapter
from errand.agent.codex import Codex
from errand.agent.gemini_cli import GeminiCli
from errand.agent.loop import AgentResult
from errand.agent.mini_swe_agent import MiniSweAgent
from errand.agent.opencode import OpenCode
from errand.errors import ConfigError

__all__ = ["AGENT_KINDS", "DEFAULT_KIND", "EXTERNAL_KINDS", "TaskAgent", "agent_kind", "cli_adapter"]

DEFAULT_KIND = "errand"
#: The agent CLIs errand can run in a task's sandbox, each a :class:`~errand.agent.cli.CliAdapter`.
ADAPTERS: dict[str, type[CliAdapter]] = {
    adapter.kind: adapter for adapter in (ClaudeCode, Codex, GeminiCli, OpenCode, MiniSweAgent, Aider)}
EXTERNAL_KINDS: tuple[str, ...] = tuple(ADAPTERS)
AGENT_KINDS: tuple[str, ...] = (DEFAULT_KIND, *EXTERNAL_KINDS)


class TaskAgent(Protocol):
    """What a round needs of an agent.

    :meth:`run` works on the prompt until the run ends (``finished``, ``budget_exhausted``,
    ``stuck``, ``error``) or asks a person (``needs_input``: :meth:`resume` with the answer
    continues it, in this process, or in another after :meth:`suspended` and :meth:`restore`).
    :meth:`send_message` queues a person's message for the agent's next chance to read it.
    ``spent`` is what the run has used so far.
    """

    spent: Spent

    async def run(self, task: str) -> AgentResult: ...

    async def resume(self, answer: str) -> AgentResult: ...

    def send_message(self, text: str, *, ref: Any = None) -> None: ...

    def suspended(self) -> dict[str, Any]: ...

    def restore(self, saved: dict[str, Any]) -> None: ...


def agent_kind(value: object, *, where: str = "agent") -> str:
    """``value`` as an agent kind, or a ConfigError naming ``where`` it came from and the kinds there are."""
    if not isinstance(value, str) or value.strip().lower() not in AGENT_KINDS:
        raise ConfigError(f"{where}: unknown agent {value!r} (the agents are: {', '.join(AGENT_KINDS)})",
                          code="unknown_agent")
    return value.strip().lower()


def cli_adapter(kind: str, *, workdir: str) -> CliAdapter:
    """The adapter of the agent CLI ``kind``, reading one run's stream in ``workdir``."""
    adapter = ADAPTERS.get(kind)
    if adapter is not None:
        return adapter(workdir)
    raise ConfigError(f"{kind!r} is not an agent CLI errand runs (those are: {', '.join(EXTERNAL_KINDS)})",
                      code="unknown_agent")
