"""The gateway's one error: each refusal of a grant or a mount, or a call on a stopped gateway, has
its ``.code`` to branch on, and leaves the grants as they were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from errand.errors import ErrandError
from errand.gateway import Budget, Gateway, GatewayError, Upstream
from gateway.conftest import REAL_KEY


async def test_a_gateway_not_started_or_stopped_has_no_address_and_grants_nothing(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path / "transcripts")
    upstream = Upstream("anthropic", "https://api.example.org", REAL_KEY)
    for refused in (lambda: gateway.address, lambda: gateway.origin):
        with pytest.raises(GatewayError) as stopped:
            refused()
        assert stopped.value.code == "gateway_stopped"
    with pytest.raises(GatewayError) as stopped:
        await gateway.grant("task-1", upstream)
    assert stopped.value.code == "gateway_stopped"
    async with gateway:
        await gateway.grant("task-1", upstream)  # the refused grant left no id behind
        await gateway.revoke("task-1")
    with pytest.raises(GatewayError) as stopped:
        _ = gateway.address
    assert stopped.value.code == "gateway_stopped"


@pytest.mark.parametrize("path", ["mcp", "/mcp/", "/v1", "/v1beta/tools", ""])
def test_a_mount_beside_the_providers_routes_only(tmp_path: Path, path: str) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("never served")

    gateway = Gateway(tmp_path / "transcripts")
    with pytest.raises(GatewayError) as refused:
        gateway.mount(path, app)
    assert refused.value.code == "invalid_config" and isinstance(refused.value, ErrandError)
    gateway.mount("/mcp", app)


async def test_values_that_are_not_an_upstream_a_budget_or_prices_are_refused(gateway: Gateway) -> None:
    upstream = Upstream("openai-chat", "https://api.example.org/v1", REAL_KEY)
    bad: list[dict[str, Any]] = [{"upstream": {"base_url": "https://x"}}, {"budget": {"max_tokens": 5}},
                                 {"pricing": 0.5}]
    for given in bad:
        arguments = {"upstream": upstream, "budget": Budget(max_tokens=5), **given}
        with pytest.raises(GatewayError) as refused:
            await gateway.grant("task-2", **arguments)
        assert refused.value.code == "invalid_config"
        assert REAL_KEY not in refused.value.message
    with pytest.raises(GatewayError) as unknown:
        await gateway.revoke("task-2")  # none of them was granted
    assert unknown.value.code == "unknown_grant"


async def test_grants_are_checked_when_made(gateway: Gateway, tmp_path: Path) -> None:
    from errand.errors import ConfigError
    from errand.gateway import GatewayError

    upstream = Upstream("anthropic", "https://api.example.org", REAL_KEY)
    assert REAL_KEY not in repr(upstream)
    await gateway.grant("task-15", upstream)
    with pytest.raises(GatewayError) as twice:
        await gateway.grant("task-15", upstream)
    assert twice.value.code == "grant_exists"
    with pytest.raises(ConfigError):
        await gateway.grant("../escape", upstream)
    with pytest.raises(ConfigError):
        Upstream("bedrock", "https://x", "k")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Budget(max_tokens=-1)
    with pytest.raises(GatewayError) as unknown:
        await gateway.revoke("task-16")
    assert unknown.value.code == "unknown_grant"
