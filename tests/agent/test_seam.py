"""The seam every agent of a task sits behind: a kind read from a person's input, and the adapter of
each agent CLI."""

from __future__ import annotations

import pytest

from errand.agent.seam import AGENT_KINDS, DEFAULT_KIND, EXTERNAL_KINDS, agent_kind, cli_adapter
from errand.errors import ConfigError


def test_errand_s_own_loop_is_the_default_and_not_an_agent_cli() -> None:
    assert DEFAULT_KIND == "errand" == AGENT_KINDS[0] and DEFAULT_KIND not in EXTERNAL_KINDS
    assert set(EXTERNAL_KINDS) == {"claude-code", "codex", "gemini-cli", "opencode", "mini-swe-agent", "aider"}


@pytest.mark.parametrize(("given", "kind"), [("errand", "errand"), (" Claude-Code\n", "claude-code"),
                                             ("CODEX", "codex")])
def test_a_kind_is_read_whatever_its_case_and_spaces(given: str, kind: str) -> None:
    assert agent_kind(given) == kind


@pytest.mark.parametrize("given", ["claude", "", "gpt-4.1", None, 3, ["codex"]])
def test_an_unknown_kind_is_refused_naming_where_it_came_from_and_the_kinds(given: object) -> None:
    with pytest.raises(ConfigError) as caught:
        agent_kind(given, where="errand.toml [agent] kind")
    assert caught.value.code == "unknown_agent"
    assert caught.value.message.startswith("errand.toml [agent] kind: unknown agent")
    assert ", ".join(AGENT_KINDS) in caught.value.message


@pytest.mark.parametrize("kind", EXTERNAL_KINDS)
def test_each_agent_cli_has_its_adapter(kind: str) -> None:
    assert cli_adapter(kind, workdir="/workspace").kind == kind


@pytest.mark.parametrize("kind", ["errand", "Codex", "unknown"])
def test_only_an_agent_cli_s_exact_kind_has_an_adapter(kind: str) -> None:
    with pytest.raises(ConfigError) as caught:
        cli_adapter(kind, workdir="/workspace")
    assert caught.value.code == "unknown_agent"
