"""A repository without errand.toml gets the environment its files describe: read off them
(never run), written as the errand.toml a person would write, and read by the same reader."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import forkserver
from errand.errors import ConfigError
from errand.tasks.round.detect import detect
from errand.tasks.round.environment import Environment


def layout(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_dependency_group_of_tests_is_installed_and_pytest_from_its_configuration(tmp_path: Path) -> None:
    repo = layout(tmp_path, {
        "pyproject.toml": '[project]\nname = "x"\n[dependency-groups]\ndev = ["tox"]\ntests = ["pytest", "freezegun"]\n'
                          "[tool.pytest.ini_options]\ntestpaths = ['tests']\n",
        "uv.lock": "version = 1\n"})
    found = detect(repo)
    assert found is not None
    assert found.setup == ("python3 -m venv .venv", ".venv/bin/pip install --quiet --upgrade pip",
                           ".venv/bin/pip install --quiet -e . --group tests")  # tests before dev; pip >= 25.1
    assert found.test == ".venv/bin/python -m pytest -q"
    assert any("uv.lock" in reason for reason in found.reasons)
    environment = Environment.load(repo)
    assert (environment.setup, environment.test) == (found.setup, found.test)
    assert environment.setup_registries == ("pip",) and environment.source is None
    assert environment.detected == found.summary()


def test_an_extra_of_tests_and_requirement_files(tmp_path: Path) -> None:
    repo = layout(tmp_path, {
        "setup.py": "from setuptools import setup\nsetup()\n",
        "pyproject.toml": '[project]\nname = "x"\n[project.optional-dependencies]\ntest = ["pytest>=8"]\n',
        "requirements.txt": "requests\n", "requirements/dev.txt": "black\n", "tests/unit/test_a.py": ""})
    found = detect(repo)
    assert found is not None
    assert found.setup[-1] == ".venv/bin/pip install --quiet -e '.[test]' -r requirements.txt -r requirements/dev.txt"
    assert found.test == ".venv/bin/python -m pytest -q"


def test_pytest_is_added_when_nothing_installs_it_and_a_tests_folder_has_tests(tmp_path: Path) -> None:
    repo = layout(tmp_path, {"requirements.txt": "attrs\n", "tests/test_x.py": "def test_x(): pass\n"})
    found = detect(repo)
    assert found is not None
    assert found.setup[-1] == ".venv/bin/pip install --quiet -r requirements.txt pytest"
    assert found.test is not None and any("tests/" in reason for reason in found.reasons)


def test_a_python_project_without_tests_gets_setup_and_no_test_command(tmp_path: Path) -> None:
    found = detect(layout(tmp_path, {"pyproject.toml": '[project]\nname = "x"\n'}))
    assert found is not None and found.test is None and found.setup[-1].endswith("-e .")
    assert "tests none found" in found.summary()


@pytest.mark.parametrize(("files", "setup", "test"), [
    ({"package-lock.json": "{}"}, "npm ci --no-audit --no-fund", "npm test"),
    ({"yarn.lock": ""}, "npm install --no-audit --no-fund", "npm test"),
])
def test_node_projects(tmp_path: Path, files: dict[str, str], setup: str, test: str) -> None:
    repo = layout(tmp_path, {"package.json": json.dumps({"scripts": {"test": "mocha"}}), **files})
    found = detect(repo)
    assert found is not None and found.setup == (setup,) and found.test == test
    assert Environment.load(repo).setup_registries == ("npm",)


def test_npms_own_placeholder_test_script_is_not_a_test_command(tmp_path: Path) -> None:
    stub = 'echo "Error: no test specified" && exit 1'  # what `npm init` writes
    found = detect(layout(tmp_path, {"package.json": json.dumps({"scripts": {"test": stub}})}))
    assert found is not None and found.test is None


@pytest.mark.parametrize("files", [{}, {"README.md": "hi"}, {"package.json": "not json"},
                                   {"pyproject.toml": "not [ toml"}])
def test_nothing_to_go_on_is_the_defaults(tmp_path: Path, files: dict[str, str]) -> None:
    repo = layout(tmp_path, files)
    assert detect(repo) is None
    assert Environment.load(repo) == Environment()


def test_an_errand_toml_is_never_second_guessed(tmp_path: Path) -> None:
    repo = layout(tmp_path, {"requirements.txt": "pytest\n", "tests/test_x.py": "",
                             "errand.toml": '[test]\ncommand = "make check"\n'})
    environment = Environment.load(repo)
    assert (environment.setup, environment.test, environment.detected) == ((), "make check", None)


def test_a_manifest_is_read_never_run_and_names_are_quoted(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    repo = layout(tmp_path / "repo", {
        "setup.py": f"open({str(marker)!r}, 'w')\n",
        "pyproject.toml": '[project]\nname = "x"\n[project.optional-dependencies]\n"tests" = ["pytest"]\n'})
    found = detect(repo)
    assert found is not None and not marker.exists()
    assert Environment.load(repo).setup == found.setup  # the written file is valid TOML errand reads


def errand(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return forkserver.run([*args], cwd=cwd, timeout=120)


@pytest.mark.slow  # errand processes, one after another
def test_errand_init_writes_the_detected_file_and_refuses_to_replace_one(tmp_path: Path) -> None:
    repo = layout(tmp_path / "repo", {"requirements.txt": "pytest\n", "tests/test_x.py": ""})
    wrote = errand("init", cwd=repo)
    assert wrote.returncode == 0, wrote.stderr
    written = (repo / "errand.toml").read_text()
    assert written in wrote.stdout and "# - requirements.txt" in written
    assert Environment.load(repo).test == ".venv/bin/python -m pytest -q"
    (repo / "errand.toml").write_text("# mine\n")
    again = errand("init", "--repo", str(repo), cwd=tmp_path)
    assert again.returncode == 2 and "is there already" in again.stderr
    assert (repo / "errand.toml").read_text() == "# mine\n"  # nothing changed
    assert errand("init", "--force", cwd=repo).returncode == 0
    assert (repo / "errand.toml").read_text() == written
    empty = layout(tmp_path / "empty", {"README.md": "hi"})
    nothing = errand("init", cwd=empty)
    assert nothing.returncode == 2 and "nothing in" in nothing.stderr and not (empty / "errand.toml").exists()


def test_links_out_of_the_repository_are_not_followed(tmp_path: Path) -> None:
    outside = layout(tmp_path / "outside", {"requirements.txt": "pytest\n", "tests/test_x.py": "",
                                            "package.json": json.dumps({"scripts": {"test": "mocha"}})})
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "requirements.txt").symlink_to(outside / "requirements.txt")
    (repo / "package.json").symlink_to(outside / "package.json")
    assert detect(repo) is None  # manifests through links out of the repository are not read
    (repo / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (repo / "tests").symlink_to(outside / "tests")  # nor is a tests folder that is a link walked
    found = detect(repo)
    assert found is not None and found.test is None


@pytest.mark.parametrize("pyproject", [
    'project = "x"\n', 'project = ["a"]\ntool = 5\n', '[project]\noptional-dependencies = 5\n',
    '[project]\noptional-dependencies = ["test"]\n', 'dependency-groups = "tests"\n[project]\nname = "x"\n',
    "a = " + "[" * 5000 + "]" * 5000 + "\n"])
def test_a_manifest_of_odd_shape_says_nothing_and_crashes_nothing(tmp_path: Path, pyproject: str) -> None:
    """Found by the red team: a value that is not a table crashed detection (and `errand init`, and the
    run); one nested past the parser's depth raised RecursionError; a list of names matched by `in`."""
    repo = layout(tmp_path, {"pyproject.toml": pyproject, "tests/test_x.py": ""})
    found = detect(repo)
    assert found is None or ("[test]" not in found.setup[-1] and "--group" not in found.setup[-1])
    Environment.load(repo)  # and it loads
    nested = layout(tmp_path / "node", {"package.json": "[" * 100_000 + "]" * 100_000})
    assert detect(nested) is None


@pytest.mark.parametrize(("files", "installs_pytest"), [
    ({"requirements.txt": "# run the tests with: pytest\nattrs\n"}, True),  # a comment is no requirement
    ({"pyproject.toml": '[project]\nname = "x"\n[project.optional-dependencies]\ndev = []\n'
                        '[dependency-groups]\ntest = ["pytest"]\n'}, True),  # the group is not the one installed
    ({"requirements.txt": "pytest-cov\n"}, True),  # a plugin is not pytest
    ({"requirements.txt": "PyTest>=8 ; python_version > '3'\n"}, False),
    ({"pyproject.toml": '[project]\nname = "x"\n[dependency-groups]\ntests = ["pytest==8.4"]\n'}, False),
])
def test_pytest_is_installed_unless_what_is_installed_names_it(tmp_path: Path, files: dict[str, str],
                                                                installs_pytest: bool) -> None:
    found = detect(layout(tmp_path, {**files, "tests/test_a.py": ""}))
    assert found is not None and found.test is not None
    assert found.setup[-1].endswith(" pytest") is installs_pytest, found.setup


def test_a_package_json_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_bytes(b"\xef\xbb\xbf" + json.dumps({"scripts": {"test": "jest"}}).encode())
    found = detect(tmp_path)
    assert found is not None and found.test == "npm test"


def test_an_errand_toml_nested_past_the_readers_depth_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "errand.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="nested deeper") as raised:
        Environment.load(tmp_path)
    assert raised.value.code == "invalid_toml"


@pytest.mark.slow  # errand processes, one after another
def test_errand_init_force_replaces_a_hard_link_and_refuses_a_directory(tmp_path: Path) -> None:
    repo = layout(tmp_path / "repo", {"requirements.txt": "pytest\n"})
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    os.link(outside, repo / "errand.toml")
    assert errand("init", "--force", cwd=repo).returncode == 0
    assert outside.read_text() == "keep me\n" and "[setup]" in (repo / "errand.toml").read_text()
    (repo / "errand.toml").unlink()
    (repo / "errand.toml").mkdir()
    refused = errand("init", "--force", cwd=repo)
    assert refused.returncode == 2 and "is a directory" in refused.stderr and "Traceback" not in refused.stderr
