"""What a sandbox needs to install from the host's package registries, per registry kind asked
for: pip's (read from pip itself), and a clear error for a kind errand does not know."""

from __future__ import annotations

from pathlib import Path

import pytest

from errand import ConfigError
from errand.sandbox._images.pipconfig import host_pip_settings
from errand.sandbox.registries import RegistryAccess, host_registries


def test_pips_settings_become_the_sandboxes_environment_paths_and_domains(pip_config: Path, tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    pip_config.write_text(f"[global]\nindex-url = https://mirror.test/simple\nfind-links = {tmp_path}/wheels\n")
    access = host_registries(["pip"])
    assert ("PIP_INDEX_URL", "https://mirror.test/simple") in access.env
    assert str(tmp_path / "wheels") in access.paths and "mirror.test" in access.domains
    assert list(access.env) == sorted(access.env)
    assert access.fingerprint() == [list(access.env), list(access.paths), list(access.domains)]
    pip_config.write_text("[global]\nindex-url = https://another.test/simple\n")
    host_pip_settings.cache_clear()
    assert host_registries(["pip"]).fingerprint() != access.fingerprint()  # another index: another cache key


def test_no_kind_asked_is_nothing_to_reach() -> None:
    assert host_registries([]) == RegistryAccess()


def test_an_unknown_registry_is_a_clear_error() -> None:
    with pytest.raises(ConfigError) as caught:
        host_registries(["cargo", "pip"])
    assert caught.value.code == "unknown_registry" and "'cargo'" in str(caught.value)


@pytest.mark.parametrize("kind", ["pip", "npm"])
def test_a_host_tool_that_hangs_is_stopped_with_an_error_naming_it(
        kind: str, pip_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from errand.sandbox import registries
    from errand.sandbox._images import host_tools

    hangs = tmp_path / "bin" / kind
    hangs.parent.mkdir()
    hangs.write_text("#!/bin/sh\nexec sleep 600\n")
    hangs.chmod(0o755)
    monkeypatch.setattr("sys.executable", str(hangs))  # pip's settings are read by errand's own Python
    monkeypatch.setenv("PATH", f"{hangs.parent}:/usr/bin:/bin")
    monkeypatch.setattr(host_tools, "TIMEOUT", 0.2)
    registries._npm.cache_clear()
    try:
        with pytest.raises(ConfigError) as caught:
            host_registries([kind])
    finally:
        registries._npm.cache_clear()
    assert caught.value.code == "registry_settings_unreadable"
    assert f"host's {kind} settings" in caught.value.message and str(hangs) in caught.value.message
