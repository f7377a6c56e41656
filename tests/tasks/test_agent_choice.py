"""Which agent works a task: chosen at submission (--agent, else errand.toml's [agent] kind at the
base commit, else config.toml's agent, else errand's own), recorded with the task, shown where
the task is shown; an unknown one is refused and creates nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import errand
from engine.harness import make_repo
from errand.errors import ConfigError
from errand.forge.outbound.body import pull_body
from errand.tasks.service import TaskService

SCRIPT = "scripted:/dev/null"


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("ERRAND_HOME", str(home))
    return home / "config.toml"


@pytest.mark.parametrize(("flag", "toml_kind", "default", "chosen"), [
    (None, None, None, "errand"),
    ("claude-code", None, None, "claude-code"),
    (None, "claude-code", None, "claude-code"),
    (None, None, "claude-code", "claude-code"),
    ("errand", "claude-code", "claude-code", "errand"),  # the flag wins
    (None, "errand", "claude-code", "errand"),  # the repository's errand.toml over the settings file
    ("Claude-Code ", None, None, "claude-code"),
])
def test_the_agent_is_chosen_at_submission_and_recorded(service: TaskService, tmp_path: Path, settings: Path,
                                                        flag: str | None, toml_kind: str | None,
                                                        default: str | None, chosen: str) -> None:
    if default is not None:
        settings.write_text(f'agent = "{default}"\n')
    toml = '[test]\ncommand = "true"\n' + (f'[agent]\nkind = "{toml_kind}"\n' if toml_kind else "")
    repo = make_repo(tmp_path / "project", toml=toml)
    task = service.submit("fix it", repo=repo, model=SCRIPT, agent=flag)
    assert task.agent == chosen
    assert service.store.get_task(task.id).agent == chosen


def test_an_unknown_agent_is_refused_and_creates_nothing(service: TaskService, tmp_path: Path,
                                                        settings: Path) -> None:
    repo = make_repo(tmp_path / "project")
    with pytest.raises(ConfigError) as flag:
        service.submit("fix it", repo=repo, model=SCRIPT, agent="cursor")
    assert flag.value.code == "unknown_agent" and "claude-code" in flag.value.message
    bad = make_repo(tmp_path / "bad", toml='[agent]\nkind = "devin"\n')
    with pytest.raises(ConfigError) as toml:
        service.submit("fix it", repo=bad, model=SCRIPT)
    assert toml.value.code == "unknown_agent" and "errand.toml at " in toml.value.message
    settings.write_text('agent = "aider-ish"\n')
    with pytest.raises(ConfigError) as default:
        service.submit("fix it", repo=repo, model=SCRIPT)
    assert default.value.code == "unknown_agent" and "config.toml" in default.value.message
    assert service.store.list_tasks() == []


def test_the_pull_request_says_which_agent_worked(service: TaskService, tmp_path: Path, settings: Path) -> None:
    repo = make_repo(tmp_path / "project")
    task = service.submit("fix it", repo=repo, model=SCRIPT, agent="claude-code")
    body = pull_body(task, None, issue=None, qa=[], review_url=None, requested_by=None)
    assert f"errand task `{task.id}` · agent claude-code" in body
    plain = service.submit("fix it", repo=repo, model=SCRIPT)
    assert "agent errand" in pull_body(plain, None, issue=None, qa=[], review_url=None, requested_by=None)


@pytest.mark.slow  # errand processes, one after another
def test_a_person_names_the_agent_on_the_command_line_and_show_says_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = make_repo(tmp_path / "project")
    queued = errand(home, "run", "fix it", "--repo", str(repo), "--model", SCRIPT, "--agent", "claude-code",
                    "--no-worker", "--json")
    assert queued.returncode == 0, queued.stderr
    task = json.loads(queued.stdout)
    assert task["agent"] == "claude-code"
    shown = errand(home, "show", task["id"])
    assert shown.returncode == 0, shown.stderr
    assert "agent claude-code" in shown.stdout
    refused = errand(home, "run", "fix it", "--repo", str(repo), "--model", SCRIPT, "--agent", "cursor",
                     "--no-worker")
    assert refused.returncode != 0
    assert "unknown agent 'cursor'" in refused.stderr + refused.stdout
