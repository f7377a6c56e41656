"""An agent's configuration, checked when it is made: a bad value is refused naming it, before any run."""

from __future__ import annotations

from typing import Any

import pytest

from errand.agent.budgets import Budgets
from errand.agent.config import AgentConfig, AgentHooks
from errand.agent.context import ContextPolicy
from errand.agent.retry import RetryPolicy
from errand.errors import ConfigError


@pytest.mark.parametrize("workdir", ["workspace", "", "./workspace", None, b"/workspace"])
def test_the_working_directory_must_be_an_absolute_path_in_the_sandbox(workdir: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        AgentConfig(workdir=workdir)
    assert "workdir" in caught.value.message and caught.value.code == "invalid_config"


@pytest.mark.parametrize(("name", "value"), [
    ("budgets", {"max_steps": 3}), ("context", None), ("retry", RetryPolicy), ("budgets", ContextPolicy()),
    ("instructions", ["AGENTS.md"]), ("memories", 7),
])
def test_a_part_of_the_wrong_kind_is_refused_naming_it(name: str, value: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        AgentConfig(workdir="/workspace", **{name: value})
    assert caught.value.message.startswith(f"{name} must be") and caught.value.code == "invalid_config"


def test_the_defaults_and_a_value_that_cannot_change() -> None:
    config = AgentConfig(workdir="/workspace", instructions="Run make test.")
    assert (config.budgets, config.context, config.retry) == (Budgets(), ContextPolicy(), RetryPolicy())
    assert config.memories is None
    with pytest.raises(AttributeError):
        config.workdir = "/elsewhere"  # type: ignore[misc]
    assert AgentConfig(workdir="/workspace") == AgentConfig(workdir="/workspace")


def test_every_hook_is_optional() -> None:
    hooks = AgentHooks()
    assert (hooks.on_event, hooks.memory, hooks.file_notes, hooks.clock) == (None, None, None, None)
