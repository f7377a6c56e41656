"""A run's model access through the worker's gateway: a grant gives the run a token of its own and
the gateway's address as the sandbox sees it, never the key; the token works until the run's
grant is revoked; a run without the key, or on a wire the gateway does not speak, gets none."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from errand.agent.budgets import Budgets
from errand.errors import ConfigError
from errand.models import ModelEndpoint, ModelError, Usage
from errand.sandbox import GATEWAY_URL
from errand.tasks.round.model_access import RunGrants

KEY = "sk-the-real-key-stays-on-the-host"
# The upstream is a closed port on loopback: a call the grant lets through fails there (502), not at the gateway.
ENDPOINT = ModelEndpoint("openai", "gpt-test", base_url="http://127.0.0.1:9/v1", api_key_env="UPSTREAM_KEY")


@pytest.fixture
async def grants(tmp_path: Path) -> AsyncIterator[RunGrants]:
    grants = RunGrants({"UPSTREAM_KEY": KEY}, transcripts=tmp_path / "transcripts")
    try:
        yield grants
    finally:
        await grants.close()


async def call(grants: RunGrants, base_url: str, token: str) -> httpx.Response:
    """A chat call as the CLI makes it from the sandbox, sent to the gateway's host address."""
    assert grants.gateway is not None
    host, port = grants.gateway.address
    async with httpx.AsyncClient(timeout=60) as client:
        return await client.post(base_url.replace(GATEWAY_URL, f"http://{host}:{port}") + "/chat/completions",
                                 headers={"Authorization": f"Bearer {token}"},
                                 json={"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]})


async def test_a_grant_is_a_token_of_the_runs_own_until_it_is_revoked(grants: RunGrants) -> None:
    access = await grants.grant("t-1-r1", ENDPOINT, Budgets(), "openai-chat")
    assert access.base_url == GATEWAY_URL + "/v1" and access.model == "gpt-test"
    assert access.token != KEY and KEY not in repr(access) and access.token not in repr(access)
    assert access.relay is not None and access.relay.startswith("127.0.0.1:")
    assert (await call(grants, access.base_url, access.token)).status_code == 502  # let through to the upstream
    assert (await call(grants, access.base_url, "not-a-grant")).status_code == 401
    other = await grants.grant("t-1-r2", ENDPOINT, Budgets(), "openai-chat")
    assert other.token != access.token
    assert await grants.revoke("t-1-r1") == (Usage(), 0)
    revoked = await call(grants, access.base_url, access.token)
    assert revoked.status_code == 401 and "revoked" in revoked.text
    assert (await call(grants, other.base_url, other.token)).status_code == 502  # the other run's grant stands
    assert await grants.revoke("t-1-r1") is None  # revoked already


async def test_a_run_gets_no_grant_without_the_key_or_on_an_unknown_wire(grants: RunGrants) -> None:
    with pytest.raises(ModelError) as missing:
        await grants.grant("t-1-r1", replace(ENDPOINT, api_key_env="NOT_SET"), Budgets(), "openai-chat")
    assert missing.value.code == "model_key_missing" and "$NOT_SET" in str(missing.value)
    with pytest.raises(ConfigError) as unknown:
        await grants.grant("t-1-r1", ENDPOINT, Budgets(), "smtp")
    assert unknown.value.code == "invalid_config" and "'smtp'" in str(unknown.value)
    assert grants.gateway is None and grants.grants == {}  # nothing was started for them


async def test_closing_stops_the_gateway_and_a_later_grant_starts_it_again(grants: RunGrants) -> None:
    first = await grants.grant("t-1-r1", ENDPOINT, Budgets(), "openai-chat")
    await grants.close()
    assert grants.gateway is None and grants.grants == {}
    again = await grants.grant("t-1-r2", ENDPOINT, Budgets(), "openai-chat")
    assert again.token != first.token
    assert (await call(grants, again.base_url, again.token)).status_code == 502
