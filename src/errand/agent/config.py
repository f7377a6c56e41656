"""What an agent is given besides its model and workspace: settings, and the hooks it calls out to.

:class:`AgentConfig` is a value — where the agent works, its budgets, how its
conversation is kept in the window and failed calls retried, the instructions
and memories it starts with — validated when it is made, and the same for every
run it configures. :class:`AgentHooks` are the callables a run reports to and
asks: its events, the project's memory, notes on the files it opens, the clock::

    config = AgentConfig(workdir="/workspace", budgets=Budgets(max_steps=50), instructions=agents_md)
    agent = Agent(model, sandbox, config, AgentHooks(on_event=save_event))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from errand.agent.budgets import Budgets
from errand.agent.context import ContextPolicy
from errand.agent.memory_tools import MemoryHooks
from errand.agent.progress import EventHandler
from errand.agent.retry import Clock, RetryPolicy
from errand.errors import ConfigError

__all__ = ["AgentConfig", "AgentHooks", "FileNotes"]

#: What the model should know about a file it opened (its path relative to the working directory): "" for nothing.
FileNotes = Callable[[str], Awaitable[str]]


@dataclass(frozen=True)
class AgentConfig:
    """How one agent works.

    ``workdir`` is the absolute path in the workspace the tools act in (the
    repository's working copy). ``instructions`` are the project's instruction
    files; ``memories`` what errand recalled for the task, both given in the
    system prompt. ``context`` and ``retry`` tune how the conversation is kept
    in the model's window (``model.profile.context_window`` when the model has
    a profile) and how failed model calls are retried.
    """

    workdir: str
    budgets: Budgets = field(default_factory=Budgets)
    instructions: str | None = None
    memories: str | None = None
    context: ContextPolicy = field(default_factory=ContextPolicy)
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def __post_init__(self) -> None:
        if not isinstance(self.workdir, str) or not self.workdir.startswith("/"):
            raise ConfigError(f"workdir must be an absolute path inside the sandbox, not {self.workdir!r}")
        for name, kind in (("budgets", Budgets), ("context", ContextPolicy), ("retry", RetryPolicy)):
            if not isinstance(getattr(self, name), kind):
                raise ConfigError(f"{name} must be a {kind.__name__}, not {getattr(self, name)!r}",
                                  code="invalid_config")
        for name in ("instructions", "memories"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise ConfigError(f"{name} must be text or None, not {getattr(self, name)!r}", code="invalid_config")


@dataclass(frozen=True)
class AgentHooks:
    """What a run calls out to; each is optional.

    ``on_event(kind, data)`` sees every step (see :mod:`errand.agent.loop`);
    ``memory`` registers the recall/remember tools, answered by it;
    ``file_notes(path)`` is what the model should know about a file it opened or
    edited (a path relative to the working directory), added to that tool's
    result; ``clock`` is where time is read and waited (tests pass their own).
    """

    on_event: EventHandler | None = None
    memory: MemoryHooks | None = None
    file_notes: FileNotes | None = None
    clock: Clock | None = None
