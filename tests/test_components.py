"""The suite's own guards: a missing component fails under CI instead of skipping, each test
session (each pytest-xdist worker) holds a range of sandbox uids no other live session holds, and
the tests sharing a module's fixture run on one worker, which makes it once."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import components
import grouping
from errand.agent.seam import EXTERNAL_KINDS
from uids import UID_BASE, UID_SPAN, claim_uid_range

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def chromium_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(components.COMPONENTS, "chromium", lambda: "chromium is not installed here")


@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_missing_component_fails_the_test_under_ci(chromium_gone: None, monkeypatch: pytest.MonkeyPatch,
                                                      ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match=r"chromium is not installed here.*install is broken"):
        components.require("chromium")


@pytest.mark.parametrize("ci", [None, "", "false"])
def test_a_missing_component_skips_the_test_outside_ci(chromium_gone: None, monkeypatch: pytest.MonkeyPatch,
                                                        ci: str | None) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="chromium is not installed here"):
        components.require("chromium")


def test_a_component_that_is_here_neither_skips_nor_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(components.COMPONENTS, "runsc", lambda: None)
    monkeypatch.setenv("CI", "true")
    components.require("runsc")


def test_the_mark_names_only_components_the_setup_installs() -> None:
    assert components.needs("postgresql", "temporal").args == ("postgresql", "temporal")
    with pytest.raises(ValueError, match="unknown components \\['chromim'\\]"):
        components.needs("chromim")


def run_pytest(directory: Path, ci: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           str(directory)], capture_output=True, text=True, env={"CI": ci, "PATH": "/usr/bin:/bin"},
                          cwd=directory, timeout=300)


def suite_with_runsc_missing(directory: Path, test: str) -> Path:
    """A suite wired as this one is (the hooks of tests/conftest.py), where runsc is missing."""
    (directory / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import components\n"
        "components.COMPONENTS['runsc'] = lambda: 'runsc is not installed here'\n"
        "def pytest_runtest_setup(item):\n    components.check(item)\n")
    (directory / "test_needing.py").write_text(test)
    return directory


@pytest.mark.slow  # pytest sessions of their own
def test_the_mark_fails_a_test_under_ci_and_skips_it_elsewhere(tmp_path: Path) -> None:
    suite = suite_with_runsc_missing(tmp_path, "from components import needs\n\n"
                                               "@needs('runsc')\ndef test_in_gvisor():\n    pass\n")
    under_ci, elsewhere = run_pytest(suite, "true"), run_pytest(suite, "")
    assert under_ci.returncode == 1 and "1 error" in under_ci.stdout, under_ci.stdout  # failed as it is set up
    assert "runsc is not installed here" in under_ci.stdout and "install is broken" in under_ci.stdout
    assert elsewhere.returncode == 0 and "1 skipped" in elsewhere.stdout, elsewhere.stdout


def test_under_ci_every_component_is_here() -> None:
    """CI ran the setup command first: each component it installs must be usable (the run's own
    session also fails on this, for tests that skip on terms of their own)."""
    if not components.under_ci():
        pytest.skip("outside CI a component may be missing; tests that need it skip")
    assert components.broken() == {}


def test_two_sessions_never_hold_the_same_uid_range(tmp_path: Path) -> None:
    first, first_lock = claim_uid_range(tmp_path)
    second, second_lock = claim_uid_range(tmp_path)
    try:
        assert first != second
        assert {first, second} == {UID_BASE + UID_SPAN, UID_BASE + 2 * UID_SPAN}
    finally:
        second_lock.close()
    first_lock.close()
    again, again_lock = claim_uid_range(tmp_path)  # a range a session let go of is free again
    again_lock.close()
    assert again == first


@pytest.mark.slow  # pytest sessions of their own
def test_the_tests_sharing_a_module_fixture_run_on_one_worker_which_makes_it_once(tmp_path: Path) -> None:
    """Wired as this suite is (tests/conftest.py's hook, ``-n 2 --dist loadgroup`` as scripts/test
    runs it). With the marks added after pytest-xdist read them, or on pytest 9.2, the module's
    tests went round the workers and each made the fixture again."""
    made, ran = tmp_path / "made", tmp_path / "ran"
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import os, pytest, grouping\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_collection_modifyitems(config, items):\n"
        "    grouping.group_and_order(config, items, os.path.dirname(__file__))\n")
    (tmp_path / "test_shared.py").write_text(
        "import os, time, pytest\n"
        "@pytest.fixture(scope='module')\n"
        "def image():\n"
        f"    with open({str(made)!r}, 'a') as f: f.write(os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n"
        "@pytest.mark.parametrize('n', range(6))\n"
        "def test_uses(image, n):\n"
        f"    with open({str(ran)!r}, 'a') as f: f.write(os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n"
        "    time.sleep(0.2)\n"
        "@pytest.mark.parametrize('n', range(6))\n"
        "def test_alone(n):\n"
        "    time.sleep(0.2)\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                           "--dist", "loadgroup", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin"}, timeout=300)
    assert done.returncode == 0 and "12 passed" in done.stdout, done.stdout + done.stderr
    assert len(ran.read_text().split()) == 6 and len(set(ran.read_text().split())) == 1, ran.read_text()
    assert len(made.read_text().split()) == 1, made.read_text()  # made once, on that worker


def test_the_tests_of_one_agent_cli_go_to_one_worker_which_installs_it_once() -> None:
    """Each agent CLI's layer is cached in a worker's home: its modules' tests share a group, so
    mini-swe-agent (730 MB) is installed once a run, not on each worker drawing one of its tests."""
    assert grouping.agent_cli_group("engine/test_claude_code.py") == "agent-cli:claude-code"
    assert grouping.agent_cli_group("engine/test_claude_code_mcp.py") == "agent-cli:claude-code"
    assert grouping.agent_cli_group("engine/test_codex_mcp.py") == "agent-cli:codex"
    assert grouping.agent_cli_group("engine/test_mini_swe_agent.py") == "agent-cli:mini-swe-agent"
    assert grouping.agent_cli_group("engine/test_engine.py") is None
    assert grouping.agent_cli_group("engine/test_codexes.py") is None
    assert grouping.agent_cli_group("tasks/test_codex.py") is None
    # Every agent CLI has its tests where the rule looks for them (a renamed module would lose its group).
    engine = Path(__file__).parent / "engine"
    for kind in EXTERNAL_KINDS:
        assert (engine / f"test_{kind.replace('-', '_')}.py").is_file(), kind


def test_a_serial_test_is_marked_where_scripts_test_finds_it() -> None:
    """scripts/test's serial phases collect only the test modules whose text has ``mark.serial``
    (collecting the whole suite again costs each pytest process ~10 s of CPU). A serial mark given
    any other way (a conftest, a name bound to the mark, ``add_marker``) would leave its test run
    by no phase: every mention of the mark is checked to be one that search finds."""
    pattern = re.compile(r"mark\.serial\b")
    assert pattern.pattern in (ROOT / "scripts" / "test").read_text()
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            named = (isinstance(node, ast.Attribute) and node.attr == "serial"
                     and isinstance(node.value, ast.Attribute) and node.value.attr == "mark")
            given = (isinstance(node, ast.Call) and _called(node.func) in ("add_marker", "Mark", "getattr")
                     and any(isinstance(arg, ast.Constant) and arg.value == "serial" for arg in node.args))
            if named:
                assert path.name.startswith("test_"), f"{path}:{node.lineno}: a serial mark outside a test module"
                assert pattern.search(ast.get_source_segment(path.read_text(), node) or ""), path
            assert not given, f"{path}:{node.lineno}: the serial mark named as a string"


def _called(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
