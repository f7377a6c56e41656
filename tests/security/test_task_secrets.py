"""A task's tools use the operator's declared secrets: ``[secrets]`` of errand's config.toml.

Through a real task round (the local engine, a scripted model, the repository's
setup): the setup command and the agent's shell command curl the declared test
host over HTTPS through the egress proxy with ``$API_TOKEN``. The test host
records what reached it; the task's events, ``errand logs``/``show``, the diff
(where the command wrote the sandbox's environment) and the run's result hold
only the placeholder.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest

import forkserver
from engine.harness import FINISH, FIX, READ, make_repo, running_engine, scripted, wait_for_state
from errand import _settings
from errand.errors import ConfigError
from errand.sandbox import AsyncSandbox, Network, Secret
from errand.tasks.lifecycle import TaskState
from errand.tasks.round import steps, task_secrets
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from nethosts import ALLOWED, OTHER, TestCA, TestHost
from security.test_egress_secrets import headers_of

CURL = 'curl -sS --max-time 60 -H "Authorization: Bearer $API_TOKEN" https://{host}{path}'
SETUP = json.dumps(CURL.format(host=ALLOWED, path="/setup"))  # a TOML basic string is a JSON one here
TOML = f'[network]\ndomains = ["{ALLOWED}"]\n[setup]\ncommands = [{SETUP}]\n[test]\ncommand = "python3 test_calc.py"\n'

# The agent's command: the declared host with the secret, and everything the sandbox's
# environment holds written into the working copy, where the diff shows it.
SHELL = (CURL.format(host=ALLOWED, path="/agent") + " > reply.txt; env > env.txt; "
         "tr '\\0' '\\n' < /proc/self/environ > environ.txt; "
         "grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt > store-count.txt; "
         "ls /etc/errand > errand-etc.txt")


@pytest.fixture
def host(egress_hosts, test_ca: TestCA, monkeypatch: pytest.MonkeyPatch) -> TestHost:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("ERRAND_EGRESS_CA_FILE", str(test_ca.cert))
    return egress_hosts.public  # type: ignore[no-any-return]


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The operator's config.toml, errand's settings file for this test."""
    path = tmp_path / "config.toml"
    monkeypatch.setattr(_settings, "config_path", lambda: path)
    return path


async def test_a_task_uses_the_operators_secret_and_holds_only_its_placeholder(
        host: TestHost, config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    value = f"real-{secrets.token_hex(16)}"
    monkeypatch.setenv("API_TOKEN", value)
    monkeypatch.delenv("MISSING_TOKEN", raising=False)
    monkeypatch.setenv("OTHER_TOKEN", f"other-{secrets.token_hex(8)}")
    config.write_text(f'[secrets]\nAPI_TOKEN = ["{ALLOWED}"]\nOTHER_TOKEN = ["{OTHER}"]\n'
                      f'MISSING_TOKEN = ["{ALLOWED}"]\n')
    mark = host.mark()
    with TaskStore.open(f"sqlite:///{tmp_path / 'tasks.db'}") as store:
        service = TaskService(store)
        repo = make_repo(tmp_path / "project", toml=TOML)
        (tmp_path / "script.json").write_text("[]")
        task = service.submit("fix", repo=repo, model=f"scripted:{tmp_path / 'script.json'}")
        model = scripted([[READ], [FIX], [("shell", {"command": SHELL})], [FINISH]])
        async with running_engine(store, lambda _s, _i: model, concurrency=1):
            done = await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW, TaskState.FAILED, seconds=900)
        events = store.events(task.id, 0, 1_000_000)
        assert done.state is TaskState.READY_FOR_REVIEW, [(e.kind, e.data) for e in events if e.kind != "model"][-7:]
        outcome = service.chosen_run(task.id).outcome
        assert outcome is not None
        patch, result = outcome.patch, json.dumps(outcome.to_json())
        cli_env = {**os.environ, "ERRAND_DATABASE_URL": str(store.engine.url), "COLUMNS": "200"}
        cli_env.pop("API_TOKEN")
        shown = {what: forkserver.run([what, task.id], env=cli_env, check=True).stdout for what in ("logs", "show")}

    # The test host got the value, from setup's sandbox and from the agent's.
    served = {e["path"]: e for e in host.events(mark, ev="http")}
    assert headers_of(served["/setup"])["authorization"] == f"Bearer {value}"
    assert headers_of(served["/agent"])["authorization"] == f"Bearer {value}"
    # The sandbox held a placeholder; the diff shows it, and nowhere the value.
    [placeholder] = {line.split("=", 1)[1] for line in patch.splitlines()
                     if line.startswith("+API_TOKEN=")}
    assert placeholder.startswith("errand-placeholder-")
    assert "+hello from public" in patch  # the reply reached the agent
    texts = {"events": json.dumps([[e.kind, e.data] for e in events]), "patch": patch, "result": result, **shown}
    assert [name for name, text in texts.items() if value in text] == []
    assert "OTHER_TOKEN=" not in patch and "MISSING_TOKEN=" not in patch  # left out, not even a placeholder
    # Each sandbox trusts its own CA alone: setup's was not kept in the environment's image.
    host_count = Path("/etc/ssl/certs/ca-certificates.crt").read_text().count("BEGIN CERTIFICATE")
    assert f"+{host_count + 1}\n" in patch
    # Which secrets each sandbox got, and why the others were left out, is in the task's log.
    said = {e.data["role"]: e.data for e in events if e.kind == "secrets"}
    assert [g["name"] for g in said["agent"]["given"]] == ["API_TOKEN"] == [g["name"] for g in said["setup"]["given"]]
    withheld = {w["name"]: w["reason"] for w in said["setup"]["withheld"]}
    assert "does not allow" in withheld["OTHER_TOKEN"] and "$MISSING_TOKEN is not set" in withheld["MISSING_TOKEN"]
    assert "OTHER_TOKEN left out" in shown["logs"] and "MISSING_TOKEN left out" in shown["logs"]


def test_the_secrets_table_is_checked_and_never_takes_a_value(config: Path) -> None:
    config.write_text('[secrets]\nAPI_TOKEN = "ghp-what-belongs-in-the-environment"\n')  # a value, not hosts
    with pytest.raises(ConfigError) as raised:
        task_secrets.declared()
    assert str(config) in raised.value.message and "ghp-what" not in raised.value.message
    config.write_text('[secrets]\nAPI_TOKEN = [1]\n')
    with pytest.raises(ConfigError, match="list of hosts"):
        task_secrets.declared()
    config.write_text('[secrets]\n"bad name" = ["example.org"]\n')
    with pytest.raises(ConfigError, match="environment variable name"):
        task_secrets.declared()
    config.write_text('[secrets]\nAPI_TOKEN = ["example.org", "*.example.net:8443"]\n')
    decision = task_secrets.decide(Network.allow("example.org"), {"API_TOKEN": "v"})
    assert decision.given == () and "does not allow" in dict(decision.withheld)["API_TOKEN"]
    decision = task_secrets.decide(Network.allow("example.org", "*.example.net:8443"), {"API_TOKEN": "v"})
    assert [s.name for s in decision.given] == ["API_TOKEN"] and decision.withheld == ()


def test_a_declared_secret_may_name_the_header_it_goes_in(config: Path) -> None:
    config.write_text('[secrets]\nGITLAB_TOKEN = { hosts = ["gitlab.example.org"], header = "PRIVATE-TOKEN" }\n'
                      'API_TOKEN = ["example.org"]\n')
    decision = task_secrets.decide(Network.allow("example.org", "gitlab.example.org"),
                                   {"GITLAB_TOKEN": "glpat-1", "API_TOKEN": "v"})
    assert {(s.name, s.hosts, s.header) for s in decision.given} == {
        ("GITLAB_TOKEN", ("gitlab.example.org",), "PRIVATE-TOKEN"),
        ("API_TOKEN", ("example.org",), "Authorization")}
    for table, says in (('{ hosts = ["example.org"], header = "Bad Header" }', "header must be a header name"),
                        ('{ hosts = ["example.org"], heder = "X-Token" }', "or a table such as"),
                        ('{ header = "X-Token" }', "or a table such as"),
                        ('{ hosts = ["example.org"], header = 7 }', "or a table such as")):
        config.write_text(f"[secrets]\nGITLAB_TOKEN = {table}\n")
        with pytest.raises(ConfigError, match=says) as raised:
            task_secrets.declared()
        assert str(config) in raised.value.message


async def test_setups_snapshot_keeps_none_of_its_sandboxs_egress_ca() -> None:
    """A setup sandbox whose trust store is its own (not bound from the host): the CA made for
    its secrets is trusted there, and the image its snapshot makes trusts only what the base did."""
    store = "/etc/ssl/certs/ca-certificates.crt"
    count = "grep -c 'BEGIN CERTIFICATE' " + store + "; ls /etc/errand 2>&1 || true"
    sandbox = await AsyncSandbox.create(network=Network.allow("example.org"), timeout=300,
                                        secrets=[Secret("API_TOKEN", "v" * 20, hosts=["example.org"])])
    try:
        before = (await sandbox.run("sh", "-c", count)).stdout
        await steps._without_egress_ca(sandbox)
        image = await sandbox.snapshot()
    finally:
        await sandbox.terminate()
    after = await AsyncSandbox.create(image, timeout=300)
    try:
        kept = (await after.run("sh", "-c", count)).stdout
        env = (await after.run("env")).stdout
    finally:
        await after.terminate()
    host = Path(store).read_text().count("BEGIN CERTIFICATE")
    assert before.splitlines()[0] == str(host + 1) and "egress-ca.pem" in before
    assert kept.splitlines()[0] == str(host) and "egress-ca.pem" not in kept, kept
    # ... nor the variables that named that CA's files and held the placeholder (a red team's find:
    # the image kept SSL_CERT_FILE=/etc/errand/ca-bundle.pem, gone, and curl in a later sandbox
    # without the secret failed: "error setting certificate file").
    for name in ("API_TOKEN", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
                 "NODE_EXTRA_CA_CERTS"):
        assert f"{name}=" not in env, env
