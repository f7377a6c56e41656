"""errand's MCP server as each agent CLI's configuration names it: the token only ever by the name of
the variable that holds it, each call bounded, and nothing at all without tool access."""

from __future__ import annotations

import json
import shlex

import pytest

from errand.agent.cli import ToolAccess
from errand.agent.mcp_config import (
    TOKEN_ENV,
    TOOL_SECONDS,
    claude_code_env,
    claude_code_flags,
    codex_env,
    codex_flags,
    errand_tool_name,
    gemini_servers,
    opencode_servers,
    tools_env,
)

TOKEN = "errand-tools-token-9d1f"
ACCESS = ToolAccess("http://127.0.0.1:3129/mcp", TOKEN)


def test_without_tool_access_no_cli_is_given_a_server() -> None:
    assert claude_code_flags(None) == codex_flags(None) == []
    assert claude_code_env(None) == codex_env(None) == tools_env(None) == {}
    assert gemini_servers(None) == opencode_servers(None) == {}


def test_the_token_is_in_the_environment_and_in_no_configuration() -> None:
    for configuration in (claude_code_flags(ACCESS), codex_flags(ACCESS), gemini_servers(ACCESS),
                          opencode_servers(ACCESS)):
        assert TOKEN not in json.dumps(configuration)
    assert tools_env(ACCESS) == codex_env(ACCESS) == {TOKEN_ENV: TOKEN}
    assert claude_code_env(ACCESS)[TOKEN_ENV] == TOKEN
    assert TOKEN not in repr(ACCESS)


def test_claude_code_gets_only_errand_s_server_with_the_token_by_variable() -> None:
    flag, config, strict = claude_code_flags(ACCESS)
    assert (flag, strict) == ("--mcp-config", "--strict-mcp-config")
    assert json.loads(config) == {"mcpServers": {"errand": {
        "type": "http", "url": ACCESS.url, "headers": {"Authorization": "Bearer ${ERRAND_TOOLS_TOKEN}"}}}}
    assert claude_code_env(ACCESS)["MCP_TOOL_TIMEOUT"] == str(TOOL_SECONDS * 1000)


def test_codex_s_server_is_one_toml_value_naming_the_token_s_variable() -> None:
    flag, value = codex_flags(ACCESS)
    assert flag == "-c" and value.startswith("mcp_servers.errand={")
    assert f'url="{ACCESS.url}"' in value and 'bearer_token_env_var="ERRAND_TOOLS_TOKEN"' in value
    assert f"tool_timeout_sec={TOOL_SECONDS}" in value
    assert shlex.split(shlex.join(codex_flags(ACCESS))) == [flag, value]


def test_a_url_with_quotes_stays_one_string_in_codex_s_value() -> None:
    _, value = codex_flags(ToolAccess('http://127.0.0.1:1/mcp?"x"', TOKEN))
    assert 'url="http://127.0.0.1:1/mcp?\\"x\\""' in value


def test_gemini_and_opencode_each_expand_the_variable_their_own_way() -> None:
    gemini = gemini_servers(ACCESS)["errand"]
    assert gemini["httpUrl"] == ACCESS.url and gemini["headers"] == {"Authorization": "Bearer ${ERRAND_TOOLS_TOKEN}"}
    assert gemini["timeout"] == TOOL_SECONDS * 1000 and gemini["trust"] is True
    opencode = opencode_servers(ACCESS)["errand"]
    assert opencode["type"] == "remote" and opencode["oauth"] is False and opencode["enabled"] is True
    assert opencode["headers"] == {"Authorization": "Bearer {env:ERRAND_TOOLS_TOKEN}"}


@pytest.mark.parametrize(("name", "prefix", "logged"), [
    ("mcp__errand__ask_person", "mcp__errand__", "mcp__errand__ask_person"),
    ("mcp_errand_recall", "mcp_errand_", "mcp__errand__recall"),
    ("errand_propose_memory", "errand_", "mcp__errand__propose_memory"),
    ("errand_delete_everything", "errand_", "errand_delete_everything"),  # not one of errand's tools
    ("bash", "errand_", "bash"),
    ("ask_person", "errand_", "ask_person"),  # errand's tool's name, but not by this CLI's prefix
])
def test_each_cli_s_name_for_errand_s_tools_is_logged_as_claude_code_names_it(name: str, prefix: str,
                                                                             logged: str) -> None:
    assert errand_tool_name(name, prefix) == logged
