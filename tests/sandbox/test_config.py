"""A sandbox's mounts, resources and environment as values checked when they are made: bad
input fails with a clear code before anything exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from errand import ConfigError, Mount, Resources
from errand.sandbox.config import check_env, parse_size, sandbox_path


@pytest.mark.parametrize(("given", "size"), [
    (4096, 4096), ("1GiB", 1024**3), ("512MiB", 512 * 1024**2), ("2G", 2 * 1000**3), (" 1.5 kib ", 1536),
    ("10b", 10), ("7", 7), ("1Ti", 1024**4),
])
def test_a_size_is_read_in_its_units(given: int | str, size: int) -> None:
    assert parse_size(given, what="memory") == size


@pytest.mark.parametrize("given", ["lots", "1 GB GB", "-1GiB", "1PiB", "", True, 0, "0MiB", -5])
def test_a_size_that_is_none_or_not_positive_is_refused(given: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_size(given, what="memory")
    assert caught.value.code == "invalid_size" and str(caught.value).startswith("memory must be")


@pytest.mark.parametrize(("path", "normal"), [("/work", "/work"), ("/work/", "/work"), ("//a//b/./c", "/a/b/c")])
def test_a_sandbox_path_is_absolute_and_normalised(path: str, normal: str) -> None:
    assert sandbox_path(path, what="workdir") == normal


@pytest.mark.parametrize(("path", "code"), [("", "invalid_path"), ("work", "relative_path"),
                                            ("/a/../etc", "invalid_path"), ("/a\0b", "invalid_path"),
                                            (None, "invalid_path")])
def test_a_bad_sandbox_path_is_refused(path: Any, code: str) -> None:
    with pytest.raises(ConfigError) as caught:
        sandbox_path(path, what="workdir")
    assert caught.value.code == code


@pytest.mark.parametrize("env", [{"": "x"}, {"A=B": "x"}, {"A\0": "x"}, {"A": "x\0y"}, {"A": 1}, {2: "x"}])
def test_a_bad_environment_is_refused(env: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        check_env(env)
    assert caught.value.code == "invalid_env"


def test_mounts_copy_or_bind_read_only_unless_asked(tmp_path: Path) -> None:
    copied = Mount.copy(tmp_path, "/work/")
    assert (copied.kind, copied.source, copied.target, copied.read_only) == ("copy", tmp_path, "/work", False)
    assert Mount.bind(tmp_path, "/data").read_only
    assert not Mount.bind(tmp_path, "/data", read_only=False).read_only


@pytest.mark.parametrize(("target", "code"), [("/", "reserved_path"), ("/proc", "reserved_path"),
                                              ("/dev/shm", "reserved_path"), ("relative", "relative_path"),
                                              ("/x/../proc", "invalid_path")])
def test_a_mount_over_what_errand_provides_or_a_bad_target_is_refused(tmp_path: Path, target: str, code: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Mount.copy(tmp_path, target)
    assert caught.value.code == code
    assert Mount.copy(tmp_path, "/process").target == "/process"  # only the reserved trees themselves


def test_a_mount_of_a_missing_source_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        Mount.bind(tmp_path / "missing", "/data")
    assert caught.value.code == "missing_mount_source" and str(tmp_path / "missing") in str(caught.value)


def test_resources_take_their_defaults_and_sizes_in_units() -> None:
    default = Resources()
    assert (default.cpus, default.memory, default.pids, default.disk, default.disk_medium) == (
        None, 2 * 1024**3, 1024, 4 * 1024**3, "auto")
    given = Resources(cpus=1, memory="512MiB", pids=64, disk=10 * 1024**2, disk_medium="memory")
    assert (given.cpus, given.memory, given.disk) == (1.0, 512 * 1024**2, 10 * 1024**2)


@pytest.mark.parametrize("given", [{"cpus": 0}, {"cpus": True}, {"cpus": "2"}, {"pids": 7}, {"pids": 8.0},
                                   {"memory": "15MiB"}, {"disk": "1000KiB"}, {"disk_medium": "ssd"}])
def test_resources_below_what_a_sandbox_needs_are_refused(given: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as caught:
        Resources(**given)
    assert caught.value.code == "invalid_limit"
