"""Who an accepted commit credits: the forge user who asked, at the forge's own no-reply address."""

from __future__ import annotations

from pathlib import Path

import pytest

from errand.forge.hosts.gitea import GiteaForge
from errand.forge.hosts.github import GitHubForge
from errand.forge.hosts.gitlab import GitLabForge
from errand.forge.outbound.attribution import credit_asker, noreply_address, web_host
from errand.tasks.events import Credited
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore


@pytest.mark.parametrize(("base_url", "host"), [("https://api.github.com", "github.com"),
                                                ("https://GHE.corp/api/v3", "ghe.corp"),
                                                ("https://api.git.acme:8443/api/v1", "git.acme"),
                                                ("not a url", "")])
def test_the_web_host_is_the_api_host_without_its_api_prefix(base_url: str, host: str) -> None:
    assert web_host(base_url) == host


def test_each_forge_has_its_own_no_reply_form() -> None:
    github = GitHubForge("t", base_url="https://api.github.com")
    enterprise = GitHubForge("t", base_url="https://ghe.corp/api/v3")
    assert noreply_address(github, "octo", 583231) == "583231+octo@users.noreply.github.com"
    assert noreply_address(github, "octo", None) == "octo@users.noreply.github.com"
    assert noreply_address(enterprise, "octo", 7) == "7+octo@users.noreply.ghe.corp"
    assert noreply_address(GiteaForge("t", base_url="https://git.acme/api/v1"), "dev", 3) == "dev@noreply.git.acme"
    assert noreply_address(GitLabForge("t", base_url="https://gl.acme/api/v4"), "dev", 3) == "dev@noreply.gl.acme"


def test_the_asker_is_credited_and_a_bot_or_nobody_is_not(tmp_path: Path) -> None:
    forge = GitHubForge("t", base_url="https://api.github.com")
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        service = TaskService(store, memory=None)
        task = store.create_task(title="t", instruction="i", repo="/r")
        assert not credit_asker(service, forge, task.id, "dependabot[bot]", 49699333)
        assert not credit_asker(service, forge, task.id, None, None)
        assert not credit_asker(service, forge, task.id, "-dash-first", 1)
        assert store.events(task.id, kinds=["credited"]) == []
        assert credit_asker(service, forge, task.id, "octo", 583231)
        [event] = store.events(task.id, kinds=["credited"])
        assert Credited.of(event) == Credited("octo", "583231+octo@users.noreply.github.com")
