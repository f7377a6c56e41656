"""The host's pip settings, read from pip itself: the variables a sandbox's pip_install gets, the
local paths they name (bound read-only), and the index hosts the egress proxy must allow."""

from __future__ import annotations

from pathlib import Path

import pytest

from errand.sandbox._images.pipconfig import host_pip_settings


def test_an_index_local_wheels_and_constraints_are_passed_on(pip_config: Path, tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    (tmp_path / "index/simple").mkdir(parents=True)
    (tmp_path / "pins").mkdir()
    (tmp_path / "pins/constraints.txt").write_text("httpx==0.28.1\n")
    pip_config.write_text("[global]\nindex-url = https://mirror.test:8443/simple\n"
                          f"extra-index-url = file://{tmp_path}/index/simple http://other.test/simple\n"
                          f"find-links = {tmp_path}/wheels {tmp_path}/missing\n"
                          f"constraint = {tmp_path}/pins/constraints.txt\n"
                          "timeout = 30\n")
    settings = host_pip_settings()
    assert settings.env["PIP_INDEX_URL"] == "https://mirror.test:8443/simple"
    assert settings.env["PIP_TIMEOUT"] == "30"
    assert settings.env["PIP_CONSTRAINT"] == f"{tmp_path}/pins/constraints.txt"
    assert {"mirror.test:8443", "other.test"} <= set(settings.hosts)
    # A local index's pages link to files beside it; a file is bound by its directory; a missing path is not bound.
    assert {str(tmp_path / "index"), str(tmp_path / "wheels"), str(tmp_path / "pins")} <= set(settings.paths)
    assert str(tmp_path / "missing") not in settings.paths
    assert list(settings.paths) == sorted(settings.paths) and list(settings.hosts) == sorted(settings.hosts)


def test_without_an_index_the_proxy_allows_pips_own_default(pip_config: Path) -> None:
    from pip._internal.models.index import PyPI

    pip_config.write_text("[global]\ntimeout = 30\n")
    settings = host_pip_settings()
    assert "PIP_INDEX_URL" not in settings.env
    assert {PyPI.netloc, PyPI.file_storage_domain} <= set(settings.hosts)


def test_a_configuration_pip_cannot_read_passes_nothing_on_and_allows_pips_own_default(pip_config: Path) -> None:
    from pip._internal.models.index import PyPI

    pip_config.write_text("index-url = https://outside.test/simple\n[global]\ntimeout = 30\n")  # no section
    settings = host_pip_settings()
    assert settings.env == {} and settings.paths == ()
    assert settings.hosts == tuple(sorted({PyPI.netloc, PyPI.file_storage_domain}))


def test_pips_own_order_decides_and_what_it_overrides_is_not_allowed_out(
        pip_config: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """[install] over [global] whatever their order in the file, a PIP_* variable over both, an empty one
    ignored, ~ expanded: as ``pip install`` on the host takes them. The files' index, overridden, is not
    one the proxy lets the build reach (sorted, a variable once lost to the file's ``global`` value)."""
    (tmp_path / "wheels").mkdir()
    pip_config.write_text("[install]\nindex-url = https://install.test/simple\n"
                          "[global]\nindex-url = https://global.test/simple\nfind-links = ~/wheels\ntimeout = 30\n"
                          "[download]\nno-index = true\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PIP_TIMEOUT", "")
    assert host_pip_settings().env["PIP_INDEX_URL"] == "https://install.test/simple"
    host_pip_settings.cache_clear()
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.test/simple")
    settings = host_pip_settings()
    assert settings.env["PIP_INDEX_URL"] == "https://env.test/simple"
    assert settings.env["PIP_TIMEOUT"] == "30" and "PIP_NO_INDEX" not in settings.env
    assert settings.env["PIP_FIND_LINKS"] == f"{tmp_path}/wheels" and str(tmp_path / "wheels") in settings.paths
    assert "env.test" in settings.hosts and not {"install.test", "global.test"} & set(settings.hosts)
