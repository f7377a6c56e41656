from __future__ import annotations

from pathlib import Path

import pytest
from repohelpers import git

from errand.errors import ErrandError
from errand.repo.errors import RepoError
from errand.repo.git import run_git


def test_untrusted_requires_explicit_git_dir(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="git_dir"):
        run_git(["status"], tmp_path, untrusted=True)


def test_failure_is_repo_error_with_command_and_stderr(tmp_path: Path) -> None:
    with pytest.raises(RepoError) as info:
        run_git(["rev-parse", "--verify", "nope"], tmp_path)
    err = info.value
    assert isinstance(err, ErrandError)
    assert err.code == "repo_error"
    assert err.command[-3:] == ["rev-parse", "--verify", "nope"]
    assert "not a git repository" in err.stderr


def test_callers_git_environment_does_not_redirect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", "false")
    assert Path(run_git(["rev-parse", "--absolute-git-dir"], repo).strip()) == (repo / ".git").resolve()
    out = run_git(["rev-parse", "--absolute-git-dir"], repo, untrusted=True, git_dir=repo / ".git")
    assert Path(out.strip()) == (repo / ".git").resolve()


def test_untrusted_ignores_caller_config_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", f"touch {tmp_path / 'marker'}")
    out = run_git(["config", "--get", "core.fsmonitor"], repo, untrusted=True, git_dir=repo / ".git")
    assert out.strip() == "false"
