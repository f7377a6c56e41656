"""``errand serve``'s settings as one value checked when it is made: a token beyond loopback, a
strong one, a real port and concurrency, a known engine, and repositories only under its roots."""

from __future__ import annotations

from pathlib import Path

import pytest

from errand.errors import ConfigError
from errand.server.config import ServerConfig, is_loopback

TOKEN = "a-test-token-long-enough-1234"


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True), (" LocalHost ", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.5", False), ("example.org", False), ("localhost.evil", False),
])
def test_loopback_is_this_machine_only(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(("given", "code"), [
    ({"port": -1}, "invalid_port"), ({"port": 65536}, "invalid_port"), ({"port": "8470"}, "invalid_port"),
    ({"token": "short"}, "weak_token"), ({"host": "10.0.0.1"}, "token_required"),
    ({"concurrency": 0}, "invalid_concurrency"), ({"concurrency": True}, "invalid_concurrency"),
    ({"engine": "celery"}, "unknown_engine"),
])
def test_a_bad_setting_is_refused_with_its_code(given: dict[str, object], code: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ServerConfig(**given)  # type: ignore[arg-type]
    assert caught.value.code == code


def test_an_engine_that_does_not_run_is_not_checked() -> None:
    assert ServerConfig(engine="celery", run_engine=False).engine == "celery"


def test_the_token_comes_from_the_environment_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_TOKEN", TOKEN)
    assert ServerConfig.from_environment(host="0.0.0.0", port=None, run_engine=False).token == TOKEN
    given = "another-token-long-enough-5678"
    assert ServerConfig.from_environment(token=given, run_engine=False).token == given
    monkeypatch.setenv("ERRAND_TOKEN", "")
    with pytest.raises(ConfigError) as caught:
        ServerConfig.from_environment(host="0.0.0.0", run_engine=False)
    assert caught.value.code == "token_required"


def test_repositories_must_lie_under_a_root_when_roots_are_set(tmp_path: Path) -> None:
    root = tmp_path / "repos"
    (root / "calc").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    ServerConfig(run_engine=False).check_repo_path(tmp_path / "elsewhere")  # no roots: any path
    config = ServerConfig(run_engine=False, repo_roots=(root,))
    config.check_repo_path(root)
    config.check_repo_path(root / "calc")
    for outside in (tmp_path / "elsewhere", root / ".." / "elsewhere", tmp_path / "repos-evil"):
        with pytest.raises(ConfigError) as caught:
            config.check_repo_path(outside)
        assert caught.value.code == "repo_not_allowed" and str(root) in str(caught.value)
    (root / "out").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError):
        config.check_repo_path(root / "out")  # a link out of a root is resolved, not trusted
