"""Where errand keeps things, read from the environment each time it is asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from errand import _settings

VARIABLES = ("ERRAND_HOME", "XDG_DATA_HOME", "ERRAND_EVAL_RUNS", "ERRAND_RUNTIME_DIR", "ERRAND_CACHE_DIR",
             "XDG_CACHE_HOME", "ERRAND_SANDBOX_UID")


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """An environment with none of errand's variables, and a home directory of its own."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    return monkeypatch


def test_the_home_is_errand_home_then_the_xdg_data_directory(bare: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert _settings.home() == tmp_path / "user" / ".local" / "share" / "errand"
    bare.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert _settings.home() == tmp_path / "data" / "errand"
    bare.setenv("ERRAND_HOME", str(tmp_path / "mine"))
    assert _settings.home() == tmp_path / "mine"
    assert _settings.config_path() == tmp_path / "mine" / "config.toml"
    assert _settings.eval_runs_dir() == tmp_path / "mine" / "eval-runs"
    bare.setenv("ERRAND_EVAL_RUNS", str(tmp_path / "runs"))
    assert _settings.eval_runs_dir() == tmp_path / "runs"


def test_an_empty_variable_is_no_setting(bare: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bare.setenv("ERRAND_HOME", "")
    bare.setenv("XDG_DATA_HOME", "")
    assert _settings.home() == tmp_path / "user" / ".local" / "share" / "errand"


def test_each_home_has_its_own_runtime_directory_short_enough_for_sockets(bare: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    bare.setenv("ERRAND_HOME", str(tmp_path / "one"))
    one, one_scope = _settings.runtime_dir(), _settings.cgroup_scope()
    bare.setenv("ERRAND_HOME", str(tmp_path / "two"))
    two = _settings.runtime_dir()
    assert one != two and one.parent == two.parent == Path("/run/errand")
    assert len(str(one)) == len("/run/errand/") + 12 and len(one_scope) == 8
    assert _settings.cgroup_scope() != one_scope
    bare.setenv("ERRAND_HOME", str(tmp_path / "one" / "."))  # the same home, spelled otherwise
    assert _settings.runtime_dir() == one and _settings.home_tag() == one.name
    bare.setenv("ERRAND_RUNTIME_DIR", str(tmp_path / "run"))
    assert _settings.runtime_dir() == tmp_path / "run"


def test_a_named_home_caches_inside_itself_and_the_default_home_in_the_user_s_cache(bare: pytest.MonkeyPatch,
                                                                                  tmp_path: Path) -> None:
    assert _settings.cache_dir() == _settings.user_cache_dir() == tmp_path / "user" / ".cache" / "errand"
    bare.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert _settings.cache_dir() == tmp_path / "cache" / "errand"
    bare.setenv("ERRAND_HOME", str(tmp_path / "mine"))
    assert _settings.cache_dir() == tmp_path / "mine" / "cache"
    assert _settings.user_cache_dir() == tmp_path / "cache" / "errand"  # compiled helpers stay shared
    bare.setenv("ERRAND_CACHE_DIR", str(tmp_path / "shared"))
    assert _settings.cache_dir() == _settings.user_cache_dir() == tmp_path / "shared"


def test_the_sandbox_uid_range_starts_far_above_ordinary_users(bare: pytest.MonkeyPatch) -> None:
    assert _settings.sandbox_uid() == _settings.DEFAULT_SANDBOX_UID == 0x70000000
    bare.setenv("ERRAND_SANDBOX_UID", "1879113728")
    assert _settings.sandbox_uid() == 1879113728
    bare.setenv("ERRAND_SANDBOX_UID", "many")
    with pytest.raises(ValueError):
        _settings.sandbox_uid()


def test_nothing_is_made_on_disk_by_asking(bare: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bare.setenv("ERRAND_HOME", str(tmp_path / "never"))
    for where in (_settings.home, _settings.runtime_dir, _settings.cache_dir, _settings.eval_runs_dir):
        where()
    assert not (tmp_path / "never").exists()


def test_the_resolved_home_follows_the_working_directory_of_a_relative_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.setenv("ERRAND_HOME", "home")
    monkeypatch.chdir(tmp_path / "a")
    assert _settings.resolved_home() == str(tmp_path / "a" / "home")
    monkeypatch.chdir(tmp_path / "b")
    assert _settings.resolved_home() == str(tmp_path / "b" / "home")


def test_the_paths_follow_every_variable_they_are_made_from_once_asked_before(bare: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    # Each path is kept once made (a create asks for them a dozen times): a change to any
    # variable it reads is a new path, and going back is the old one again.
    first, first_runtime = _settings.home(), _settings.runtime_dir()
    assert _settings.home() is first
    bare.setenv("HOME", str(tmp_path / "other"))
    assert _settings.home() == tmp_path / "other" / ".local" / "share" / "errand"
    assert _settings.runtime_dir() != first_runtime
    assert _settings.resolved_home() == str(tmp_path / "other" / ".local" / "share" / "errand")
    bare.setenv("HOME", str(tmp_path / "user"))
    assert (_settings.home(), _settings.runtime_dir()) == (first, first_runtime)
    bare.setenv("ERRAND_RUNTIME_DIR", str(tmp_path / "run"))
    assert _settings.runtime_dir() == tmp_path / "run"
    bare.setenv("ERRAND_RUNTIME_DIR", str(tmp_path / "run2"))
    assert _settings.runtime_dir() == tmp_path / "run2"
    bare.delenv("ERRAND_RUNTIME_DIR")
    assert _settings.runtime_dir() == first_runtime
