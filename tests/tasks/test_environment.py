"""errand.toml → Environment, instruction files, and the setup cache key."""

from __future__ import annotations

import json
import os
import textwrap
import tracemalloc
from pathlib import Path

import pytest

from errand.errors import ConfigError
from errand.sandbox.config import Resources
from errand.sandbox.image import Image, Step
from errand.sandbox.network import Network
from errand.tasks.round import reuse
from errand.tasks.round.environment import Environment, cache_key, instructions, keyed_on, project_guide

FULL = """
[image]
steps = [ {base = true}, {pip_install = ["pytest"]}, {run = "mkdir -p /data"}, {copy = ["tools", "/opt/tools"]} ]

[setup]
commands = ["pip install -e .", "make deps"]
[test]
command = "python -m pytest -q"
[lint]
command = "ruff check ."

[network]
domains = ["pypi.example"]
cidrs = ["203.0.113.0/24"]

[resources]
cpus = 2
memory = "2GiB"
pids = 512
disk = "4GiB"

[agent]
instructions = ["AGENTS.md", "docs/RULES.md"]
"""


def write(repo: Path, text: str) -> Path:
    path = repo / "errand.toml"
    path.write_text(textwrap.dedent(text))
    return path


def error_for(repo: Path, text: str) -> ConfigError:
    write(repo, text)
    with pytest.raises(ConfigError) as caught:
        Environment.load(repo)
    return caught.value


def test_defaults_without_a_file(tmp_path: Path) -> None:
    env = Environment.load(tmp_path)
    assert env == Environment()
    assert env.image == Image.base()
    assert env.setup == () and env.test is None and env.lint is None
    assert env.network == Network.none()
    assert env.resources == Resources()
    assert env.instruction_files == ("AGENTS.md", "CLAUDE.md", ".cursorrules", ".github/copilot-instructions.md")
    assert env.source is None


def test_empty_file_is_the_defaults(tmp_path: Path) -> None:
    write(tmp_path, "# nothing here\n")
    env = Environment.load(tmp_path)
    assert (env.image, env.setup, env.network, env.resources) == (Image.base(), (), Network.none(), Resources())


def test_full_file_round_trips(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "x.sh").write_text("echo hi\n")
    path = write(tmp_path, FULL)
    env = Environment.load(tmp_path)
    assert env.image == (Image.base().pip_install("pytest").run("mkdir -p /data")
                         .copy(tmp_path / "tools", "/opt/tools"))
    copy = env.image.steps[-1]
    assert copy == Step("copy", (str((tmp_path / "tools").resolve()), "/opt/tools"))
    assert env.setup == ("pip install -e .", "make deps")
    assert env.test == "python -m pytest -q"
    assert env.lint == "ruff check ."
    assert env.network == Network.allow("pypi.example", cidrs=["203.0.113.0/24"])
    assert env.resources == Resources(cpus=2, memory="2GiB", pids=512, disk="4GiB")
    assert env.resources.memory == 2 * 1024**3
    assert env.instruction_files == ("AGENTS.md", "docs/RULES.md")
    assert env.source == path.resolve()


def test_copy_source_is_relative_to_the_repo_not_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    write(repo, '[image]\nsteps = [{copy = ["data", "/data"]}]\n')
    assert Environment.load(repo).image.steps[-1].args == (str(repo.resolve() / "data"), "/data")


def test_copy_source_outside_the_repo_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (tmp_path / "secret").write_text("x")
    error = error_for(repo, '[image]\nsteps = [{copy = ["../secret", "/s"]}]\n')
    assert error.code == "outside_repo" and "copy" in error.message


@pytest.mark.parametrize(("text", "code", "named"), [
    ("[tests]\ncommand = 'pytest'\n", "unknown_key", "[tests]"),
    ("[test]\ncmd = 'pytest'\n", "unknown_key", "unknown key [test] cmd"),
    ("[network]\ndomain = ['pypi.example']\n", "unknown_key", "unknown key [network] domain (did you mean domains?)"),
    ("test = 'pytest'\n", "invalid_config", "[test]"),
    ("[setup]\ncommands = 'make deps'\n", "invalid_config", "[setup] commands: expected a list of non-empty strings"),
    ("[setup]\ncommands = ['ok', 3]\n", "invalid_config", "[setup] commands: expected a list of non-empty strings"),
    ("[test]\ncommand = ['pytest']\n", "invalid_config", "[test] command: expected a non-empty shell command"),
    ("[lint]\ncommand = ''\n", "invalid_config", "[lint] command: expected a non-empty shell command"),
    ("[network]\ndomains = 'pypi.example'\n", "invalid_config", "[network] domains: expected a list"),
    ("[network]\ndomains = ['*.com']\n", "overbroad_domain", "[network] domains: "),
    ("[network]\ncidrs = ['0.0.0.0/0']\n", "overbroad_cidr", "[network] cidrs: "),
    ("[resources]\npids = '512'\n", "invalid_config", "[resources] pids: expected an integer (got string '512')"),
    ("[resources]\ncpus = true\n", "invalid_config", "[resources] cpus: expected a number (got boolean True)"),
    ("[resources]\npids = 2\n", "invalid_limit", "resources"),
    ("[resources]\ncpus = -1\n", "invalid_limit", "resources"),
    ("[resources]\nmemory = 'lots'\n", "invalid_size", "resources"),
    ("[resources]\nmemory = '1MiB'\n", "invalid_limit", "resources"),
    ("[image]\nsteps = [{frobnicate = 'x'}]\n", "invalid_image_step", "unknown key [image] steps[1].frobnicate"),
    ("[image]\nsteps = {run = 'x'}\n", "invalid_config", "[image] steps: expected a list of one-key tables"),
    ("[image]\nsteps = [{run = 'a', pip_install = ['b']}]\n", "invalid_image_step", "[image] steps[1]: "),
    ("[image]\nsteps = [{pip_install = ['no such thing!']}]\n", "invalid_image_step", "[image] steps: "),
    ("[agent]\ninstructions = 'AGENTS.md'\n", "invalid_config", "[agent] instructions: expected a list of paths"),
    ("[agent]\ninstructions = ['../x.md']\n", "invalid_config", "[agent] instructions[1]: '../x.md' must be"),
    ("[agent]\nkind = 'claud'\n", "unknown_agent",
     "[agent] kind: expected one of errand, claude-code, codex, gemini-cli, opencode, mini-swe-agent, aider "
     "(got string 'claud')"),
])
def test_bad_input_is_refused_naming_key_and_file(tmp_path: Path, text: str, code: str, named: str) -> None:
    error = error_for(tmp_path, text)
    assert error.code == code, error.message
    assert named in error.message
    assert "errand.toml" in error.message


def test_unknown_keys_list_the_known_ones(tmp_path: Path) -> None:
    error = error_for(tmp_path, "[test]\ncmd = 'pytest'\n")
    assert "[test] has command" in error.message
    error = error_for(tmp_path, "[imgae]\nsteps = []\n")
    assert "unknown table [imgae] (did you mean [image]?)" in error.message and "[resources]" in error.message


def test_broken_toml_gives_line_and_column(tmp_path: Path) -> None:
    error = error_for(tmp_path, "[test]\ncommand = 'pytest'\n[setup\n")
    assert error.code == "invalid_toml"
    assert "line 3" in error.message and "column" in error.message and "errand.toml" in error.message


def test_non_utf8_is_invalid_toml(tmp_path: Path) -> None:
    (tmp_path / "errand.toml").write_bytes(b"[test]\ncommand = '\xff'\n")
    with pytest.raises(ConfigError) as caught:
        Environment.load(tmp_path)
    assert caught.value.code == "invalid_toml"


def test_config_symlinked_out_of_the_repo_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (tmp_path / "elsewhere.toml").write_text("[test]\ncommand = 'x'\n")
    (repo / "errand.toml").symlink_to(tmp_path / "elsewhere.toml")
    with pytest.raises(ConfigError) as caught:
        Environment.load(repo)
    assert caught.value.code == "outside_repo"


# ------------------------------------------------------------ instructions


def test_instructions_in_order_under_headings(tmp_path: Path) -> None:
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "copilot-instructions.md").write_text("copilot says")
    (tmp_path / "CLAUDE.md").write_text("claude says")
    (tmp_path / "AGENTS.md").write_text("agents say")
    text = instructions(tmp_path)
    assert ".cursorrules" not in text
    positions = [text.index(s) for s in ("## AGENTS.md", "agents say", "## CLAUDE.md", "claude says",
                                         "## .github/copilot-instructions.md", "copilot says")]
    assert positions == sorted(positions)


def test_instructions_follow_the_config(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("agents")
    (tmp_path / "RULES.md").write_text("rules")
    write(tmp_path, "[agent]\ninstructions = ['RULES.md']\n")
    assert instructions(tmp_path) == "## RULES.md\n\nrules\n"
    write(tmp_path, "[agent]\ninstructions = []\n")
    assert instructions(tmp_path) == ""


def test_the_guide_gives_rules_that_always_apply_and_says_which_files_it_holds_whole(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("a" * 2000)
    (tmp_path / "CLAUDE.md").write_text("claude says")
    rules = tmp_path / ".cursor" / "rules"
    rules.mkdir(parents=True)
    (rules / "style.mdc").write_text("---\ndescription: Style\nalwaysApply: true\n---\n\nImperative docstrings.\n")
    (rules / "api.mdc").write_text("---\nglobs: src/api/**\n---\nValidate with pydantic.\n")
    (rules / "money.mdc").write_text("---\ndescription: Money\n---\nUse Decimal.\n")
    guide = project_guide(tmp_path, max_file_bytes=1000)
    assert "## .cursor/rules/style.mdc (a rule that always applies)\n\nImperative docstrings.\n" in guide.text
    assert "alwaysApply" not in guide.text and "pydantic" not in guide.text and "Decimal" not in guide.text
    assert guide.whole == ("CLAUDE.md", ".cursor/rules/style.mdc")  # AGENTS.md was cut: not whole
    write(tmp_path, "[agent]\ninstructions = ['.cursor/rules/api.mdc']\n")
    listed = project_guide(tmp_path)
    assert listed.text.startswith("## .cursor/rules/api.mdc\n\nValidate with pydantic.")  # named: given whole
    assert listed.whole == (".cursor/rules/api.mdc", ".cursor/rules/style.mdc")


def test_instructions_none_present(tmp_path: Path) -> None:
    assert instructions(tmp_path) == ""


def test_instructions_are_bounded(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("a" * 100_000)
    (tmp_path / "CLAUDE.md").write_text("c" * 100)
    text = instructions(tmp_path, max_file_bytes=1000, max_total_bytes=1050)
    assert text.count("a") <= 1000 + 10 and "AGENTS.md truncated at 1000 bytes" in text
    assert "CLAUDE.md truncated at 50 bytes" in text
    assert len(instructions(tmp_path)) < 70_000


def test_instructions_skip_symlinks_out_of_the_repo(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    (repo / "AGENTS.md").symlink_to(secret)
    (repo / ".github").symlink_to(tmp_path)  # a directory link out of the repo
    (tmp_path / "copilot-instructions.md").write_text("ALSO SECRET")
    (repo / "CLAUDE.md").write_text("fine")
    text = instructions(repo)
    assert "SECRET" not in text
    assert text == "## CLAUDE.md\n\nfine\n"


def test_instructions_follow_symlinks_that_stay_inside(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "agents.md").write_text("inside")
    (tmp_path / "AGENTS.md").symlink_to("docs/agents.md")
    assert "inside" in instructions(tmp_path)


def test_instructions_ignore_non_regular_files(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").mkdir()
    os.mkfifo(tmp_path / "CLAUDE.md")
    assert instructions(tmp_path) == ""


# --------------------------------------------------------------- cache key


def test_cache_key_tracks_config_and_lockfiles_only(tmp_path: Path) -> None:
    write(tmp_path, "[setup]\ncommands = ['pip install -r requirements.txt']\n")
    (tmp_path / "requirements.txt").write_text("pytest==8.0\n")
    (tmp_path / "uv.lock").write_text("v1\n")
    (tmp_path / "main.py").write_text("print(1)\n")
    first = cache_key(tmp_path)
    assert len(first) == 64 and cache_key(tmp_path) == first

    (tmp_path / "main.py").write_text("print(2)\n")
    (tmp_path / "README.md").write_text("docs\n")
    assert cache_key(tmp_path) == first

    (tmp_path / "requirements.txt").write_text("pytest==8.1\n")
    second = cache_key(tmp_path)
    assert second != first
    (tmp_path / "uv.lock").write_text("v2\n")
    third = cache_key(tmp_path)
    assert third != second
    (tmp_path / "requirements-dev.txt").write_text("ruff\n")
    fourth = cache_key(tmp_path)
    assert fourth != third

    write(tmp_path, "[setup]\ncommands = ['pip install -r requirements.txt', 'make']\n")
    fifth = cache_key(tmp_path)
    assert fifth != fourth
    write(tmp_path, "[image]\nsteps = [{run = 'true'}]\n[setup]\ncommands = ['pip install -r requirements.txt', "
                    "'make']\n")
    assert cache_key(tmp_path) != fifth


def test_cache_key_ignores_what_does_not_affect_setup(tmp_path: Path) -> None:
    write(tmp_path, "[setup]\ncommands = ['make']\n")
    base = cache_key(tmp_path)
    write(tmp_path, "# a comment\n[setup]\ncommands = [ 'make' ]\n[test]\ncommand = 'pytest'\n"
                    "[resources]\npids = 64\n")
    assert cache_key(tmp_path) == base


def test_cache_key_without_config_and_network(tmp_path: Path) -> None:
    none = cache_key(tmp_path)
    write(tmp_path, "[network]\ndomains = ['pypi.example']\n")
    assert cache_key(tmp_path) != none


def test_cache_key_does_not_read_lockfiles_outside_the_repo(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    outside = tmp_path / "poetry.lock"
    outside.write_text("one")
    (repo / "poetry.lock").symlink_to(outside)
    key = cache_key(repo)
    outside.write_text("two")
    assert cache_key(repo) == key


def test_agent_budgets_come_from_the_agent_table(tmp_path: Path) -> None:
    from errand.agent import Budgets

    write(tmp_path, "[agent]\nmax_steps = 30\nmax_cost = 1.5\nmax_minutes = 20\n")
    env = Environment.load(tmp_path)
    assert env.budgets == Budgets(max_steps=30, max_cost=1.5, max_seconds=1200)
    assert Environment().budgets is None  # no [agent] limits: the engine's defaults apply
    for bad, needle in (("max_steps = 0", "max_steps must be a positive integer"),
                        ("max_minutes = 'soon'", r"\[agent\] max_minutes: expected a number of minutes"),
                        ("max_turns = 3", r"unknown key \[agent\] max_turns")):
        write(tmp_path, f"[agent]\n{bad}\n")
        with pytest.raises(ConfigError, match=needle):
            Environment.load(tmp_path)


# --------------------------------------------------------------- setup's own egress and key


def test_setup_has_its_own_egress_and_the_agent_keeps_the_narrow_one(tmp_path: Path) -> None:
    write(tmp_path, "[setup]\ncommands = ['make']\nnetwork = {domains = ['pkgs.example.org']}\n"
                    "[network]\ndomains = ['api.example.org']\n")
    env = Environment.load(tmp_path)
    assert env.network.domains == ("api.example.org",)
    assert env.setup_egress.domains == ("pkgs.example.org",)


def test_setup_without_its_own_egress_uses_the_agents(tmp_path: Path) -> None:
    write(tmp_path, "[setup]\ncommands = ['make']\n[network]\ndomains = ['api.example.org']\n")
    assert Environment.load(tmp_path).setup_egress == Environment.load(tmp_path).network


@pytest.mark.parametrize(("toml", "message"), [
    ("[setup]\nnetwork = {domain = ['x.example']}\n", "unknown key [setup] network.domain (did you mean domains?)"),
    ("[setup]\nnetwork = {registries = ['cargo']}\n",
     "[setup] network.registries: expected a list of pip, npm, apt (got array ['cargo'])"),
    ("[setup]\nnetwork = 'open'\n", "[setup] network: expected a table"),
    ("[setup]\nnetwork = {domains = ['*']}\n", "[setup] network.domains: "),
    ("[setup]\nkey = ['../outside.lock']\n", "[setup] key[1]: '../outside.lock' must be relative to the repository, "
                                             "without '..'"),
    ("[setup]\nkey = []\n", "[setup] key: expected \"tree\" or a non-empty list"),
])
def test_bad_setup_tables_are_refused(tmp_path: Path, toml: str, message: str) -> None:
    write(tmp_path, toml)
    with pytest.raises(ConfigError) as caught:
        Environment.load(tmp_path)
    assert message in caught.value.message


def test_cache_key_covers_the_repository_and_with_key_tree_the_whole_tree(tmp_path: Path) -> None:
    write(tmp_path, "[setup]\ncommands = ['pip install -e .']\nkey = 'tree'\n")
    first = cache_key(tmp_path, source="/src/alpha", tree="a" * 40)
    assert cache_key(tmp_path, source="/src/beta", tree="a" * 40) != first  # two repositories, one setup
    assert cache_key(tmp_path, source="/src/alpha", tree="b" * 40) != first  # another commit's tree
    assert cache_key(tmp_path, source="/src/alpha", tree="a" * 40) == first
    assert keyed_on(tmp_path, Environment.load(tmp_path)) == ["the whole tree"]


def test_by_default_another_commit_with_the_same_dependencies_shares_the_key(tmp_path: Path) -> None:
    write(tmp_path, "[setup]\ncommands = ['pip install -e .']\n")
    first = cache_key(tmp_path, source="/src/alpha", tree="a" * 40)
    assert cache_key(tmp_path, source="/src/alpha", tree="b" * 40) == first
    assert cache_key(tmp_path, source="/src/beta", tree="b" * 40) != first


PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "tally"
version = "1.4.0"
dependencies = ["attrs>=23"]

[tool.ruff]
line-length = 100
"""


def test_only_a_pyprojects_dependency_tables_key_the_environment(tmp_path: Path) -> None:
    write(tmp_path, "[setup]\ncommands = ['pip install -e .']\n")
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    first = cache_key(tmp_path)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.replace('"1.4.0"', '"1.5.0"').replace("100", "120")
                                             + "\n# a comment\n")
    assert cache_key(tmp_path) == first  # a version bump, a tool table: same environment
    for changed in (PYPROJECT.replace("attrs>=23", "attrs>=24"), PYPROJECT.replace('["hatchling"]', '["flit"]'),
                    PYPROJECT + '\n[project.optional-dependencies]\ndev = ["pytest"]\n',
                    PYPROJECT + '\n[dependency-groups]\ntest = ["pytest"]\n'):
        (tmp_path / "pyproject.toml").write_text(changed)
        assert cache_key(tmp_path) != first, changed
    (tmp_path / "pyproject.toml").write_text("not [ toml")  # unreadable: any change counts
    broken = cache_key(tmp_path)
    (tmp_path / "pyproject.toml").write_text("not [ toml either")
    assert cache_key(tmp_path) != broken
    assert keyed_on(tmp_path, Environment.load(tmp_path)) == ["pyproject.toml's dependency tables"]


def test_a_package_jsons_version_and_build_script_do_not_key_it_but_its_dependencies_do(tmp_path: Path) -> None:
    write(tmp_path, "[setup]\ncommands = ['npm ci']\n")
    manifest = {"name": "pricing", "version": "2.1.0", "scripts": {"build": "tsc", "test": "mocha"},
                "devDependencies": {"mocha": "11.8.0"}}
    (tmp_path / "package.json").write_text(json.dumps(manifest))
    (tmp_path / "package-lock.json").write_text('{"lockfileVersion": 3}')
    first = cache_key(tmp_path)
    (tmp_path / "package.json").write_text(json.dumps({**manifest, "version": "2.2.0",
                                                       "scripts": {"build": "tsc -p .", "test": "mocha -r x"}}))
    assert cache_key(tmp_path) == first
    (tmp_path / "package.json").write_text(json.dumps({**manifest, "devDependencies": {"mocha": "11.9.0"}}))
    assert cache_key(tmp_path) != first
    (tmp_path / "package.json").write_text(json.dumps(manifest))
    (tmp_path / "package-lock.json").write_text('{"lockfileVersion": 3, "packages": {}}')
    assert cache_key(tmp_path) != first
    assert keyed_on(tmp_path, Environment.load(tmp_path)) == ["package-lock.json", "package.json's dependency tables"]


def test_the_refresh_and_the_key_setting_are_read_and_checked(tmp_path: Path) -> None:
    write(tmp_path, "[setup]\ncommands = ['make']\nrefresh = ['make version']\nkey = 'tree'\n")
    env = Environment.load(tmp_path)
    assert env.setup_refresh == ("make version",) and env.setup_whole_tree and env.setup_key is None
    for bad, message in (("key = 'lockfiles'", "\\[setup\\] key: expected \"tree\" or a non-empty list"),
                         ("refresh = 'make'", "\\[setup\\] refresh: expected a list")):
        write(tmp_path, f"[setup]\n{bad}\n")
        with pytest.raises(ConfigError, match=message):
            Environment.load(tmp_path)


def test_cache_key_on_named_files_ignores_the_rest_of_the_tree(tmp_path: Path) -> None:
    write(tmp_path, "[setup]\ncommands = ['npm ci']\nkey = ['package*.json', 'packages/*/package.json']\n")
    (tmp_path / "package-lock.json").write_text("{}")
    (tmp_path / "packages/web").mkdir(parents=True)
    (tmp_path / "packages/web/package.json").write_text("{}")
    first = cache_key(tmp_path, source="/src/app", tree="a" * 40)
    assert cache_key(tmp_path, source="/src/app", tree="b" * 40) == first
    (tmp_path / "packages/web/package.json").write_text('{"name": "web"}')
    assert cache_key(tmp_path, source="/src/app", tree="b" * 40) != first


def test_the_disk_medium_is_read_and_checked(tmp_path: Path) -> None:
    write(tmp_path, "[resources]\nmemory = '128MiB'\ndisk = '1GiB'\ndisk_medium = 'disk'\n")
    assert Environment.load(tmp_path).resources.disk_medium == "disk"
    write(tmp_path, "[resources]\ndisk_medium = 'ssd'\n")
    with pytest.raises(ConfigError):
        Environment.load(tmp_path)
    write(tmp_path, "[resources]\ndisk_medium = 1\n")
    with pytest.raises(ConfigError, match=r"\[resources\] disk_medium: expected one of auto, memory, disk"):
        Environment.load(tmp_path)


def test_files_setup_names_key_the_environment_with_what_they_include(tmp_path: Path) -> None:
    # Found only by their name in setup: no pattern knows requirements-dev.lock or a bootstrap script.
    write(tmp_path, "[setup]\ncommands = ['python -m pip install -r requirements-dev.lock --constraint=ci/pins.in',"
                    " 'sh ./scripts/bootstrap.sh', 'pip install -e .']\n")
    (tmp_path / "requirements-dev.lock").write_text("-r requirements/base.in\npytest==8.0\n")
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements" / "base.in").write_text("--constraint ../ci/pins.in\nrequests\n")
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "pins.in").write_text("requests==2.31\n-r /etc/passwd\n-r ../../outside.txt\n")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "bootstrap.sh").write_text("echo set up\n")
    (tmp_path.parent / "outside.txt").write_text("not the repository's\n")
    assert keyed_on(tmp_path, Environment.load(tmp_path)) == [
        "ci/pins.in", "requirements-dev.lock", "requirements/base.in", "scripts/bootstrap.sh"]
    keys = {cache_key(tmp_path)}
    for name, text in [("requirements-dev.lock", "-r requirements/base.in\npytest==8.1\n"),
                       ("requirements/base.in", "--constraint ../ci/pins.in\nrequests\nidna\n"),
                       ("ci/pins.in", "requests==2.32\n"), ("scripts/bootstrap.sh", "echo set up again\n")]:
        (tmp_path / name).write_text(text)
        keys.add(cache_key(tmp_path))
    assert len(keys) == 5, "a change to a file setup reads kept the old environment"
    (tmp_path.parent / "outside.txt").write_text("changed\n")
    (tmp_path / "notes.md").write_text("a source change\n")
    assert cache_key(tmp_path) in keys


def test_a_setup_that_names_no_file_or_an_odd_one_keys_on_the_patterns_alone(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("-r requirements.txt\n-r\n--requirement=\n")  # includes itself
    os.mkfifo(tmp_path / "fifo.txt")
    (tmp_path / "link.txt").symlink_to("/etc/hostname")
    write(tmp_path, "[setup]\ncommands = ['pip install -r requirements.txt -r fifo.txt -r link.txt', "
                    "'cat \"unclosed', 'cp $HOME/x . && ls *.txt', 'npm ci']\n")
    assert keyed_on(tmp_path, Environment.load(tmp_path)) == ["requirements.txt"]


def test_requirement_files_that_name_many_files_are_followed_a_bounded_way(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # Each of 100 included files names 2,000 more: unbounded, 128,000 lookups before 64 were found.
    (tmp_path / "requirements.txt").write_text("".join(f"-r r{n}.txt\n" for n in range(100)))
    for n in range(100):
        (tmp_path / f"r{n}.txt").write_text("".join(f"-c r{n}-{m}.txt\n" for m in range(2_000)))
    write(tmp_path, "[setup]\ncommands = ['pip install -r requirements.txt']\n")
    looked: list[str] = []
    inside = reuse._inside
    monkeypatch.setattr(reuse, "_inside", lambda root, here, word: looked.append(word) or inside(root, here, word))
    named = keyed_on(tmp_path, Environment.load(tmp_path))
    assert "requirements.txt" in named and "r99.txt" in named
    assert len(looked) <= 10_000


def test_setup_words_that_are_no_files_name_none_and_break_nothing(tmp_path: Path) -> None:
    # A red team's finds: a one-liner's word past a file name's length (ENAMETOOLONG) failed every task.
    code = "print('" + "setting up the project environment, " * 8 + "')"
    write(tmp_path, f'[setup]\ncommands = ["python3 -c \\"{code}\\"", '
                    '"pip install -r https://example.test/c.txt?token=1"]\n')
    assert len(cache_key(tmp_path)) == 64 and keyed_on(tmp_path, Environment.load(tmp_path)) == []


def test_named_files_are_read_from_where_the_command_cds_and_through_any_pip_file(tmp_path: Path) -> None:
    (tmp_path / "server" / "deps").mkdir(parents=True)
    (tmp_path / "server" / "dev.lock").write_text("-r deps/base.lock\n")
    (tmp_path / "server" / "deps" / "base.lock").write_text("requests==2.31\n")
    (tmp_path / "x.lock").write_text("idna\n")
    write(tmp_path, "[setup]\ncommands = ['cd server && pip install -r dev.lock', 'pip install -r x.lock;true']\n")
    assert keyed_on(tmp_path, Environment.load(tmp_path)) == ["server/deps/base.lock", "server/dev.lock", "x.lock"]
    write(tmp_path, "[setup]\ncommands = ['cd server/deps && cd .. && pip install -r dev.lock; cd .. && "
                    "pip install -r x.lock']\n")
    assert keyed_on(tmp_path, Environment.load(tmp_path)) == ["server/deps/base.lock", "server/dev.lock", "x.lock"]


def test_one_include_named_a_million_times_is_looked_up_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "r.txt").write_text("-rn\n" * 100_000)
    looked: list[str] = []
    inside = reuse._inside
    monkeypatch.setattr(reuse, "_inside", lambda root, here, word: looked.append(word) or inside(root, here, word))
    assert reuse.named_files(tmp_path, ["pip install -r r.txt"]) == ["r.txt"]
    assert looked.count("n") == 1


def test_a_large_file_setup_names_is_keyed_without_holding_it_in_memory(tmp_path: Path) -> None:
    # A red team's find: `tar xf vendor.tar` of a gigabyte held the gigabyte to key it.
    with open(tmp_path / "vendor.tar", "wb") as archive:
        archive.truncate(64 << 20)
    write(tmp_path, "[setup]\ncommands = ['tar xf vendor.tar']\n")
    first = cache_key(tmp_path)
    tracemalloc.start()
    try:
        assert cache_key(tmp_path) == first
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak} bytes held to key a 64 MiB file"
    with open(tmp_path / "vendor.tar", "r+b") as archive:
        archive.seek(40 << 20)
        archive.write(b"changed")
    assert cache_key(tmp_path) != first


def test_a_keyed_file_whose_name_is_not_utf8_keys_and_is_shown(tmp_path: Path) -> None:
    (tmp_path / os.fsdecode(b"requirements\xff.txt")).write_text("pytest\n")
    write(tmp_path, "[setup]\ncommands = ['pip install pytest']\n")
    first = cache_key(tmp_path)
    assert keyed_on(tmp_path, Environment.load(tmp_path)) == ["requirements\\xff.txt"]
    (tmp_path / os.fsdecode(b"requirements\xff.txt")).write_text("pytest==8\n")
    assert cache_key(tmp_path) != first


@pytest.mark.parametrize("command", [
    "cd web && npm ci && cd .. && pip install -r dev.lock",  # back to the root
    "(cd web && npm ci); pip install -r dev.lock",  # a subshell's cd ends with it
    "cd web; cd -; pip install -r dev.lock",  # back where it was: not followed, found from the root
])
def test_a_file_named_after_the_command_cds_back_is_still_keyed(tmp_path: Path, command: str) -> None:
    # A reviewer's find: after a cd the words were read from there alone, and these were missed.
    (tmp_path / "web").mkdir()
    (tmp_path / "dev.lock").write_text("requests==2.31\n")
    assert reuse.named_files(tmp_path, [command]) == ["dev.lock"]


def test_nested_cds_read_from_the_nested_directory(tmp_path: Path) -> None:
    (tmp_path / "server" / "api").mkdir(parents=True)
    (tmp_path / "server" / "api" / "req.txt").write_text("idna\n")
    assert reuse.named_files(tmp_path, ["cd server && cd api && pip install -r req.txt"]) == ["server/api/req.txt"]
