"""errand.toml's model: strict reading with errors that name the file and the key, the JSON Schema
editors read, and the reference page, both generated from the model and committed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import get_args

import jsonschema
import pytest

from errand.agent.seam import AGENT_KINDS
from errand.errors import ConfigError
from errand.sandbox.network import Network
from errand.sandbox.registries import REGISTRY_KINDS
from errand.tasks.round import errand_toml
from errand.tasks.round.environment import Environment

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "errand-toml.md"
SCHEMA = ROOT / "docs" / "errand.schema.json"


def refused(repo: Path, text: str) -> ConfigError:
    (repo / "errand.toml").write_text(text)
    with pytest.raises(ConfigError) as caught:
        Environment.load(repo)
    return caught.value


def examples() -> list[str]:
    """The errand.toml examples the docs give."""
    return [body for page in ("errand-toml.md", "environments.md")
            for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", (ROOT / "docs" / page).read_text(), re.M | re.S)
            if lang == "toml"]


# ------------------------------------------------------------------ unknown keys, typos, wrong types


@pytest.mark.parametrize(("text", "named"), [
    ("[tests]\ncommand = 'pytest'\n", "unknown table [tests] (did you mean [test]?)"),
    ("[imgae]\nsteps = []\n", "unknown table [imgae] (did you mean [image]?)"),
    ("[image]\nstep = []\n", "unknown key [image] step (did you mean steps?)"),
    ("[setup]\ncomands = ['make']\n", "unknown key [setup] comands (did you mean commands?)"),
    ("[setup]\nnetwork = {registry = ['pip']}\n", "unknown key [setup] network.registry (did you mean registries?)"),
    ("[test]\ncomand = 'pytest'\n", "unknown key [test] comand (did you mean command?)"),
    ("[lint]\ncommnd = 'ruff check .'\n", "unknown key [lint] commnd (did you mean command?)"),
    ("[network]\ndomian = ['api.example.org']\n", "unknown key [network] domian (did you mean domains?)"),
    ("[resources]\nmemroy = '1GiB'\n", "unknown key [resources] memroy (did you mean memory?)"),
    ("[agent]\nmax_step = 5\n", "unknown key [agent] max_step (did you mean max_steps?)"),
    ("[agent]\nmodel = 'gpt'\n", "unknown key [agent] model; [agent] has kind, instructions, max_steps"),
])
def test_an_unknown_key_anywhere_is_named_with_the_file_and_the_nearest_known_one(tmp_path: Path, text: str,
                                                                                  named: str) -> None:
    error = refused(tmp_path, text)
    assert error.code == "unknown_key"
    assert error.message.startswith(f"{tmp_path.resolve() / 'errand.toml'}: {named}"), error.message


def test_an_unknown_image_step_is_named_and_keeps_the_image_steps_code(tmp_path: Path) -> None:
    error = refused(tmp_path, "[image]\nsteps = [{run = 'true'}, {pip_instal = ['pytest']}]\n")
    assert error.code == "invalid_image_step"
    assert "unknown key [image] steps[2].pip_instal (did you mean pip_install?)" in error.message


@pytest.mark.parametrize(("text", "code", "said"), [
    ("[agent]\nkind = 'claud'\n", "unknown_agent",
     "[agent] kind: expected one of errand, claude-code, codex, gemini-cli, opencode, mini-swe-agent, aider "
     "(got string 'claud')"),
    ("[setup]\nrefresh = 'make'\n", "invalid_config", "[setup] refresh: expected a list of non-empty strings"),
    ("[setup]\nnetwork = {mode = 'wide'}\n", "invalid_network", "[setup] network.mode: expected one of none, allow"),
    ("[resources]\nmemory = true\n", "invalid_config", "[resources] memory: expected a size such as \"2GiB\""),
    ("[resources]\ndisk = 1.5\n", "invalid_config", "[resources] disk: expected a size"),
    ("[agent]\nmax_tokens = '10k'\n", "invalid_budget", "[agent] max_tokens: expected an integer (got string '10k')"),
    ("[agent]\nmax_cost = '1'\n", "invalid_budget", "[agent] max_cost: expected a number of US dollars"),
    ("[image]\nsteps = [{copy = ['only-one']}]\n", "invalid_image_step", "[image] steps[1].copy: expected [source"),
    ("[image]\nsteps = [{env = {A = 1}}]\n", "invalid_image_step", "[image] steps[1].env: expected a table of"),
    ("[image]\nsteps = [{}]\n", "invalid_image_step", "[image] steps[1]: an image step has exactly one key"),
    ("[setup]\nkey = ['/etc/passwd']\n", "invalid_config", "[setup] key[1]: '/etc/passwd' must be relative"),
    ("[network]\nmode = 'allow'\n", "empty_allowlist", "[network]: "),
    ("[resources]\ndisk = '0.5MiB'\n", "invalid_limit", "[resources] disk must be at least 1MiB"),
])
def test_a_wrong_value_says_the_key_what_it_takes_and_what_it_got(tmp_path: Path, text: str, code: str,
                                                                  said: str) -> None:
    error = refused(tmp_path, text)
    assert error.code == code, error.message
    assert error.message.startswith(f"{tmp_path.resolve() / 'errand.toml'}: {said}"), error.message


def test_a_bad_file_changes_nothing_and_the_agent_kind_is_read_in_any_case(tmp_path: Path) -> None:
    (tmp_path / "errand.toml").write_text("[agent]\nkind = ' Claude-Code '\n")
    assert Environment.load(tmp_path).agent_kind == "claude-code"


# ------------------------------------------------------------------ what a valid file gives


def test_the_pages_example_gives_the_environment_it_describes(tmp_path: Path) -> None:
    (tmp_path / "errand.toml").write_text(examples()[0])
    env = Environment.load(tmp_path)
    assert env.setup == ("python3 -m venv .venv", ".venv/bin/pip install -e . -r requirements-test.txt")
    assert env.setup_registries == ("pip",) and env.setup_network == Network.none()
    assert (env.test, env.lint) == (".venv/bin/python -m pytest -q", ".venv/bin/ruff check .")
    assert env.network == Network.allow("api.example.org")
    assert env.resources.memory == 2 * 1024**3 and env.resources.pids == 1024
    assert env.agent_kind == "claude-code" and env.instruction_files == ("AGENTS.md", "docs/CONVENTIONS.md")
    assert [step.kind for step in env.image.steps][-1] == "run" and env.budgets is None


def test_the_kinds_the_model_allows_are_errands() -> None:
    assert get_args(errand_toml.AgentKind) == AGENT_KINDS
    assert get_args(errand_toml.RegistryKind) == REGISTRY_KINDS


def test_every_key_has_a_description_in_the_reference() -> None:
    reference = errand_toml.reference()
    for table, info in errand_toml.ErrandToml.model_fields.items():
        model = info.annotation
        assert isinstance(model, type) and model.__doc__, table
        assert f"### `[{table}]`" in reference
        for key, field in model.model_fields.items():
            assert field.description, f"[{table}] {key}"
            assert f"| `{field.alias or key}` |" in reference


# ------------------------------------------------------------------ what is published


def test_the_committed_schema_and_reference_are_the_models() -> None:
    """Regenerate (scripts/gen_toml_reference.py) and compare: a changed model changes both files."""
    published = errand_toml.published(PAGE.read_text())
    assert SCHEMA.read_text() == published["errand.schema.json"]
    assert PAGE.read_text() == published["errand-toml.md"]


def test_the_schema_is_draft_4_and_self_contained_as_taplo_reads_it() -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft4Validator.check_schema(schema)
    text = SCHEMA.read_text()
    assert "$ref" not in text and '"null"' not in text and '"const"' not in text


@pytest.mark.parametrize("bad", [
    "[tests]\ncommand = 'pytest'\n", "[setup]\ncomand = ['make']\n", "[setup]\nnetwork = {registries = ['cargo']}\n",
    "[test]\ncommand = 3\n", "[image]\nsteps = [{frobnicate = 'x'}]\n", "[agent]\nkind = 'claud'\n",
    "[resources]\npids = '512'\n", "[setup]\nkey = []\n", "[lint]\ncommand = ' '\n",
])
def test_an_editor_marks_what_errand_refuses(tmp_path: Path, bad: str) -> None:
    validator = jsonschema.Draft4Validator(json.loads(SCHEMA.read_text()))
    for example in examples():
        assert list(validator.iter_errors(tomllib.loads(example))) == [], example
    assert list(validator.iter_errors(tomllib.loads(bad)))
    refused(tmp_path, bad)


def _errand(*words: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "errand.cli", *words], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow  # errand processes, one after another
def test_errand_config_schema_prints_the_schema_and_check_reads_a_repository(tmp_path: Path) -> None:
    printed = _errand("config", "schema", cwd=tmp_path)
    assert printed.returncode == 0 and printed.stdout == SCHEMA.read_text()
    assert "no errand.toml" in _errand("config", "check", cwd=tmp_path).stdout
    (tmp_path / "errand.toml").write_text("[setup]\ncomand = ['make']\n")
    checked = _errand("config", "check", "--repo", str(tmp_path), cwd=ROOT)
    assert checked.returncode == 2
    assert "errand.toml: unknown key [setup] comand (did you mean commands?)" in checked.stderr
    (tmp_path / "errand.toml").write_text("[setup]\ncommands = ['make']\n")
    fine = _errand("config", "check", cwd=tmp_path)
    assert fine.returncode == 0 and fine.stdout.strip().endswith("errand.toml: ok")
