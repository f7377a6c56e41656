"""Named models in errand's settings file, and a spec resolved to the endpoint a task records."""

from __future__ import annotations

from pathlib import Path

import pytest

from errand.errors import ConfigError
from errand.models import Catalog, ModelEndpoint
from errand.models.profiles import Pricing

KEY = "sk-live-0123456789abcdef0123456789abcdef"


def catalog(tmp_path: Path, text: str) -> Catalog:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return Catalog.load(path)


def refused(tmp_path: Path, text: str, code: str) -> ConfigError:
    with pytest.raises(ConfigError) as error:
        catalog(tmp_path, text)
    assert error.value.code == code, error.value.message
    assert str(tmp_path / "config.toml") in error.value.message  # the file is named
    return error.value


LOCAL = """
model = "local"

[models.local]
provider = "openai"
model = "qwen2.5-coder:7b"
base_url = "http://127.0.0.1:8000/v1"
api_key_env = "LOCAL_LLM_KEY"

[models.claude]
provider = "anthropic"
model = "claude-sonnet-4-5"

[models.demo]
provider = "scripted"
model = "scripts/demo.json"
"""


def test_a_named_model_resolves_to_its_endpoint_and_never_to_the_environments(tmp_path: Path) -> None:
    models = catalog(tmp_path, LOCAL)
    environ = {"LOCAL_LLM_KEY": KEY, "OPENAI_BASE_URL": "http://elsewhere.invalid/v1", "OPENAI_API_KEY": "other"}
    local = models.resolve("local", environ)
    assert (local.name, local.provider, local.model, local.base_url, local.api_key_env) == (
        "local", "openai", "qwen2.5-coder:7b", "http://127.0.0.1:8000/v1", "LOCAL_LLM_KEY")
    assert local.describe() == "local = openai:qwen2.5-coder:7b at http://127.0.0.1:8000/v1, key $LOCAL_LLM_KEY"
    assert models.default == "local"
    claude = models.resolve("claude", {"ANTHROPIC_BASE_URL": "http://elsewhere.invalid"})
    assert (claude.base_url, claude.api_key_env) == ("https://api.anthropic.com", "ANTHROPIC_API_KEY")
    assert models.resolve("demo", {}).model == str(tmp_path / "scripts" / "demo.json")  # beside the file


def test_the_record_keeps_a_salted_fingerprint_never_the_key(tmp_path: Path) -> None:
    endpoint = catalog(tmp_path, LOCAL).resolve("local", {"LOCAL_LLM_KEY": KEY})
    record = endpoint.to_json()
    assert KEY not in str(record) and KEY[3:15] not in str(record)
    assert endpoint.key_status({"LOCAL_LLM_KEY": KEY}) == "same"
    assert endpoint.key_status({"LOCAL_LLM_KEY": KEY + "x"}) == "differs"
    assert endpoint.key_status({}) == "missing"
    again = catalog(tmp_path, LOCAL).resolve("local", {"LOCAL_LLM_KEY": KEY})
    assert again.key_fingerprint != endpoint.key_fingerprint  # a fresh salt: records cannot be matched up
    assert ModelEndpoint.from_json(record) == endpoint
    assert catalog(tmp_path, LOCAL).resolve("local", {}).key_fingerprint is None


def test_an_ad_hoc_spec_takes_the_submitting_environment(tmp_path: Path) -> None:
    models = Catalog.load(tmp_path / "absent.toml")
    assert models.models == {} and models.default is None
    plain = models.resolve("openai:gpt-4.1", {"OPENAI_API_KEY": KEY})
    assert (plain.base_url, plain.api_key_env, plain.name) == ("https://api.openai.com/v1", "OPENAI_API_KEY", None)
    pointed = models.resolve("openai:qwen:7b", {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
                                                "ERRAND_OPENAI_BASE_URL": "http://127.0.0.1:8/v1",
                                                "ERRAND_OPENAI_API_KEY": KEY, "OPENAI_API_KEY": "other"})
    assert (pointed.model, pointed.base_url, pointed.api_key_env) == (
        "qwen:7b", "http://127.0.0.1:8/v1", "ERRAND_OPENAI_API_KEY")  # errand's variables win, as before
    assert pointed.key_status({"ERRAND_OPENAI_API_KEY": KEY}) == "same"
    scripted = models.resolve("scripted:relative.json", {})
    assert scripted.model == str(Path("relative.json").resolve()) and scripted.base_url is None


@pytest.mark.parametrize("spec", ["nameless", "mistral:large", "openai:", ":gpt"])
def test_a_spec_that_names_nothing(tmp_path: Path, spec: str) -> None:
    with pytest.raises(ConfigError) as error:
        catalog(tmp_path, LOCAL).resolve(spec, {})
    assert error.value.code == "unknown_model" and repr(spec.strip()) in error.value.message
    if ":" not in spec:
        assert "claude, demo, local" in error.value.message  # what it could have named


@pytest.mark.parametrize(("text", "code", "needle"), [
    ("modle = 'local'\n", "unknown_key", "'modle' at the top level"),
    ("[models.x]\nprovider = 'openai'\nmodel = 'm'\nbase-url = 'http://h/v1'\n", "unknown_key",
     "'base-url' at [models.x]"),
    ("[models.x]\nprovider = 'mistral'\nmodel = 'm'\n", "unknown_model", "unknown provider 'mistral'"),
    ("[models.x]\nprovider = 'openai'\n", "invalid_config", "model must be a non-empty string"),
    ("[models.x]\nprovider = 'openai'\nmodel = 'm'\nbase_url = 'ftp://h'\n", "invalid_config", "http://"),
    ("[models.x]\nprovider = 'openai'\nmodel = 'm'\nbase_url = 'http://user:pw@h/v1'\n", "invalid_config",
     "carries credentials"),
    ("[models.x]\nprovider = 'scripted'\nmodel = 'a.json'\nbase_url = 'http://h'\n", "invalid_config",
     "no base_url"),
    ('[models."a:b"]\nprovider = "openai"\nmodel = "m"\n', "invalid_config", "provider:model"),
    ("model = 'missing'\n", "unknown_model", "names no [models.missing]"),
    ("models = 3\n", "invalid_config", "[models.NAME]"),
    ("[models\n", "invalid_toml", "malformed TOML"),
])
def test_the_settings_file_is_strict(tmp_path: Path, text: str, code: str, needle: str) -> None:
    assert needle in refused(tmp_path, text, code).message


def test_a_key_written_into_the_file_is_refused_and_never_echoed(tmp_path: Path) -> None:
    pasted = refused(tmp_path, f"[models.x]\nprovider = 'openai'\nmodel = 'm'\napi_key = '{KEY}'\n", "unknown_key")
    assert "api_key_env" in pasted.message and KEY not in pasted.message
    misplaced = refused(tmp_path, f"[models.x]\nprovider = 'openai'\nmodel = 'm'\napi_key_env = '{KEY}'\n",
                        "invalid_config")
    assert "environment variable" in misplaced.message and KEY not in misplaced.message


def test_a_named_model_overrides_the_window_and_prices_and_the_record_keeps_them(tmp_path: Path) -> None:
    models = catalog(tmp_path, """
[models.small]
provider = "openai"
model = "qwen2.5-coder:7b"
base_url = "http://127.0.0.1:8000/v1"
context_window = 16384
price = { input = 0.5, output = 1.5, cache_read = 0.05 }
stream = true

[models.sonnet]
provider = "anthropic"
model = "claude-sonnet-4-5-20250929"
context_window = 100000
""")
    small = models.resolve("small", {})
    assert (small.profile.context_window, small.stream) == (16384, True)
    assert small.profile.pricing == Pricing(0.5, 1.5, cache_read=0.05)
    assert ModelEndpoint.from_json(small.to_json()) == small  # a task's record brings them to the worker
    sonnet = models.resolve("sonnet", {}).profile
    assert sonnet.context_window == 100000 and sonnet.pricing is not None and sonnet.pricing.input == 3.0
    assert models.resolve("openai:gpt-4o", {}).profile.context_window == 128_000  # ad hoc: the table's


@pytest.mark.parametrize(("text", "code", "needle"), [
    ("context_window = 'big'\n", "invalid_config", "context_window must be a number of tokens"),
    ("price = { input = 1.0 }\n", "invalid_config", "price needs input and output"),
    ("price = { input = 1.0, output = 2.0, cached = 0.1 }\n", "unknown_key", "'cached' at [models.x] price"),
    ("price = { input = -1.0, output = 2.0 }\n", "invalid_config", "non-negative number"),
    ("stream = 'yes'\n", "invalid_config", "stream must be true or false"),
])
def test_window_and_price_settings_are_strict(tmp_path: Path, text: str, code: str, needle: str) -> None:
    assert needle in refused(tmp_path, f"[models.x]\nprovider = 'openai'\nmodel = 'm'\n{text}", code).message
