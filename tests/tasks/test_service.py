"""The task service: intake refuses bad input with a clear error and creates nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.harness import git, make_repo
from errand.errors import ConfigError
from errand.tasks.service import TaskService, issue_instruction
from errand.tasks.store.tasks import TaskStore
from postgres import on_sqlite_only


def refused(service: TaskService, code: str, **options: object) -> ConfigError:
    arguments: dict[str, object] = {"instruction": "fix it", "model": "scripted:/dev/null", **options}
    with pytest.raises(ConfigError) as error:
        service.submit(**arguments)  # type: ignore[arg-type]
    assert error.value.code == code, error.value.message
    assert service.store.list_tasks() == []
    return error.value


def test_a_path_that_is_not_a_git_repository(service: TaskService, tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    error = refused(service, "not_a_git_repo", repo=tmp_path / "plain")
    assert "is not a git repository" in error.message
    refused(service, "not_a_git_repo", repo=tmp_path / "missing")


def test_an_unknown_ref(service: TaskService, repo: Path) -> None:
    error = refused(service, "unknown_ref", repo=repo, base="no-such-branch")
    assert "no-such-branch" in error.message
    refused(service, "unknown_ref", repo=repo, base="--upload-pack=evil")


@on_sqlite_only()
@pytest.mark.parametrize(("toml", "code", "needle"), [
    ("[test\ncommand = 1", "invalid_toml", "malformed TOML"),
    ("[tests]\ncommand = 'pytest'\n", "unknown_key", "[tests]"),
    ("[test]\ncommand = 3\n", "invalid_config", "[test] command"),
    ("[network]\ndomains = ['*']\n", "overbroad_domain", "[network] domains"),
])
def test_a_malformed_errand_toml_at_the_base(service: TaskService, tmp_path: Path, toml: str, code: str,
                                             needle: str) -> None:
    repo = make_repo(tmp_path / "bad", toml=toml)
    error = refused(service, code, repo=repo)
    assert needle in error.message and "errand.toml at " in error.message


def test_the_config_is_read_as_the_base_commit_has_it(service: TaskService, repo: Path) -> None:
    (repo / "errand.toml").write_text("not toml at all [")  # an uncommitted edit is not what the task runs
    task = service.submit("fix it", repo=repo, model="scripted:/dev/null")
    assert task.base_commit == git(repo, "rev-parse", "HEAD").strip()


@on_sqlite_only()
@pytest.mark.parametrize("model", ["gpt-4.1", "mistral:large", "scripted:/no/such/script.json"])
def test_an_unknown_model(service: TaskService, repo: Path, model: str) -> None:
    error = refused(service, "unknown_model", repo=repo, model=model)
    assert model in error.message


def test_no_model_configured(service: TaskService, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ERRAND_MODEL", raising=False)
    refused(service, "no_model", repo=repo, model=None)


@on_sqlite_only()
@pytest.mark.parametrize("attempts", [0, 9, True, "3"])
def test_attempts_out_of_range(service: TaskService, repo: Path, attempts: object) -> None:
    refused(service, "invalid_attempts", repo=repo, attempts=attempts)


def test_an_empty_instruction(service: TaskService, repo: Path) -> None:
    refused(service, "empty_instruction", repo=repo, instruction="  \n")


def test_a_scripted_model_path_is_made_absolute_for_the_worker(
        service: TaskService, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "s.json").write_text("[]")
    monkeypatch.chdir(tmp_path)
    task = service.submit("fix it", repo=repo, model="scripted:s.json")
    assert task.model == f"scripted:{tmp_path / 's.json'}"


def test_an_issue_file_gives_title_and_text(tmp_path: Path) -> None:
    issue = tmp_path / "issue.md"
    issue.write_text("\n# add() subtracts\n\nIt should add.\n")
    assert issue_instruction(issue) == ("add() subtracts", "# add() subtracts\n\nIt should add.")
    with pytest.raises(ConfigError):
        issue_instruction(tmp_path / "missing.md")


def test_steering_a_task_in_the_wrong_state_changes_nothing(service: TaskService, repo: Path,
                                                            store: TaskStore) -> None:
    from errand.tasks.errors import WrongState

    task = service.submit("fix it", repo=repo, model="scripted:/dev/null")
    with pytest.raises(WrongState):
        service.answer(task.id, "yes")  # nothing was asked
    with pytest.raises(WrongState):
        service.accept(task.id)
    with pytest.raises(WrongState, match="has no result yet; send the agent a message"):
        service.followup(task.id, "more")  # the sentence says what to do instead
    with pytest.raises(ConfigError):
        service.message(task.id, "   ")
    assert store.events(task.id) == [] and store.get_task(task.id).state.value == "queued"


def test_a_model_whose_client_cannot_be_set_up(service: TaskService, repo: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ERRAND_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    error = refused(service, "model_unavailable", repo=repo, model="openai:gpt-4.1")
    assert "API key" in error.message or "api_key" in error.message
