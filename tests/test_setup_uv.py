"""scripts/uv_pip_install.py: scripts/setup installs with uv, which does not read pip's configuration;
it must look for packages where pip, configured as it is on the machine, would."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from pip._internal.models.index import PyPI  # pip's own default index: asked of pip, not written here

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "uv_pip_install.py"
# What the script prints of uv_settings(), in a child whose environment has only the given PIP_* variables.
SHOW = ("import json, sys; sys.path.insert(0, sys.argv[1]); import uv_pip_install as u; "
        "print(json.dumps(u.uv_settings(hashed=sys.argv[2] == 'hashed')))")


def settings(env: dict[str, str], *, hashed: bool = False) -> tuple[dict[str, str], list[str]]:
    clean = {key: value for key, value in os.environ.items()
             if not key.startswith("PIP_") and key not in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
    ran = subprocess.run([sys.executable, "-c", SHOW, str(SCRIPT.parent), "hashed" if hashed else "-"],
                         env={**clean, **env}, capture_output=True, text=True, timeout=120, check=True)
    uv_env, args = json.loads(ran.stdout)
    return uv_env, args


def test_pips_variables_become_uvs_settings_with_credentials_kept_off_the_command_line() -> None:
    env, args = settings({
        "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "https://user:secret@mirror.test/simple",
        "PIP_EXTRA_INDEX_URL": "https://a.test/simple\n  https://b.test/simple", "PIP_FIND_LINKS": "/srv/wheels",
        "PIP_TRUSTED_HOST": "a.test", "PIP_NO_INDEX": "yes", "PIP_CONSTRAINT": "/srv/constraints.txt",
        "PIP_PRE": "1", "PIP_ONLY_BINARY": ":all:", "PIP_CERT": "/srv/ca.pem", "PIP_CLIENT_CERT": "/srv/me.pem",
        "PIP_PROXY": "http://proxy.test:3128"})
    assert env == {"UV_INDEX_URL": "https://user:secret@mirror.test/simple",
                   "UV_EXTRA_INDEX_URL": "https://a.test/simple https://b.test/simple",
                   "UV_FIND_LINKS": "/srv/wheels", "UV_INDEX_STRATEGY": "unsafe-best-match",
                   "SSL_CERT_FILE": "/srv/ca.pem", "SSL_CLIENT_CERT": "/srv/me.pem",
                   "HTTP_PROXY": "http://proxy.test:3128", "HTTPS_PROXY": "http://proxy.test:3128",
                   "NO_PROXY": "", "no_proxy": "", "UV_HTTP_TIMEOUT": "15"}
    assert args == ["--allow-insecure-host", "a.test", "--constraints", "/srv/constraints.txt", "--no-index",
                    "--prerelease", "allow", "--only-binary", ":all:"]
    assert "secret" not in " ".join(args)
    # Requirements pinned by hash: the constraints are left out (uv refuses unhashed ones beside them).
    assert "--constraints" not in settings({"PIP_CONFIG_FILE": os.devnull, "PIP_CONSTRAINT": "/c.txt"},
                                           hashed=True)[1]


def test_pips_own_rules_hold_for_a_file(tmp_path: Path) -> None:
    """[install] over [global] whatever their order, ~ expanded, an empty variable ignored: pip's parser
    decides, not a copy of its rules."""
    config = tmp_path / "pip.conf"
    config.write_text("[install]\nindex-url = https://install.test/simple\n"
                      "[global]\nindex-url = https://global.test/simple\nfind-links = ~/wheels\ncert = ~/ca.pem\n"
                      "[download]\nno-index = true\n")
    env, args = settings({"PIP_CONFIG_FILE": str(config), "PIP_INDEX_URL": "", "HOME": str(tmp_path)})
    assert env["UV_INDEX_URL"] == "https://install.test/simple"
    assert env["UV_FIND_LINKS"] == f"{tmp_path}/wheels"
    assert env["SSL_CERT_FILE"] == f"{tmp_path}/ca.pem"
    assert "--no-index" not in args  # a [download] setting is not install's


def test_with_nothing_configured_uv_uses_pips_default_index_and_the_systems_certificates() -> None:
    env, args = settings({"PIP_CONFIG_FILE": os.devnull})
    assert env == {"UV_INDEX_URL": PyPI.simple_url, "UV_INDEX_STRATEGY": "unsafe-best-match",
                   "UV_SYSTEM_CERTS": "1", "UV_HTTP_TIMEOUT": "15"}
    assert args == []


def test_the_ca_bundle_is_the_one_pips_http_library_takes(tmp_path: Path) -> None:
    # requests takes REQUESTS_CA_BUNDLE, then CURL_CA_BUNDLE, over pip's own cert; a directory is a CA path.
    base = {"PIP_CONFIG_FILE": os.devnull, "PIP_CERT": "/srv/pip.pem", "PIP_DEFAULT_TIMEOUT": "180"}
    assert settings({**base, "CURL_CA_BUNDLE": "/srv/curl.pem"})[0]["SSL_CERT_FILE"] == "/srv/curl.pem"
    env = settings({**base, "CURL_CA_BUNDLE": "/srv/curl.pem", "REQUESTS_CA_BUNDLE": str(tmp_path)})[0]
    assert (env.get("SSL_CERT_DIR"), env.get("SSL_CERT_FILE"), env["UV_HTTP_TIMEOUT"]) == (str(tmp_path), None, "180")


def test_uvs_own_settings_and_the_ca_variables_pip_ignores_do_not_reach_it() -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from uv_pip_install import _passed_on  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(SCRIPT.parent))
    assert [key for key in ("UV_INDEX", "UV_DEFAULT_INDEX", "UV_CONSTRAINT", "UV_REQUIRE_HASHES", "SSL_CERT_FILE",
                            "SSL_CERT_DIR", "UV_CACHE_DIR", "PATH", "HTTPS_PROXY") if _passed_on(key)] == \
        ["UV_CACHE_DIR", "PATH", "HTTPS_PROXY"]


def _wheel(directory: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel, built here."""
    files = {f"{name}/__init__.py": f"VERSION = {version!r}\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  "Tag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(text.encode())}" for path, text in files.items()]
    files[f"{name}-{version}.dist-info/RECORD"] = "\n".join([*record, f"{name}-{version}.dist-info/RECORD,,"]) + "\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


@pytest.mark.skipif(not Path(sys.executable).with_name("uv").exists(), reason="scripts/setup installs uv")
def test_uv_installs_from_where_pip_is_told_to_look(tmp_path: Path) -> None:
    """End to end, offline: pip is told no index and a directory of wheels, and uv installs from it, past
    a uv.toml and uv variables of the caller's that would send it elsewhere."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "errand_probe", "1.0")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    shutil.copy(Path(sys.executable).with_name("uv"), venv / "bin" / "uv")
    (tmp_path / "uv.toml").write_text('[pip]\nprefix = "/nonexistent"\n')  # a uv.toml meant for another project
    clean = {key: value for key, value in os.environ.items() if not key.startswith(("PIP_", "UV_"))}
    done = subprocess.run([str(venv / "bin" / "python"), str(SCRIPT), "errand_probe"], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path,
                          env={**clean, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
                               "PIP_FIND_LINKS": str(wheels), "UV_CACHE_DIR": str(tmp_path / "cache"),
                               "UV_INDEX": "http://127.0.0.1:9/simple", "UV_CONSTRAINT": "/nonexistent.txt"})
    assert done.returncode == 0, done.stderr
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import errand_probe; print(errand_probe.VERSION)"],
                           capture_output=True, text=True, timeout=60, check=True)
    assert probe.stdout == "1.0\n"


def test_a_second_setup_of_a_checkout_waits_for_the_first() -> None:
    """Started while another holds the checkout (here: this test), setup says it waits and changes
    nothing until that one ends; a second setup once made the virtualenv again under the first."""
    stamp = ROOT / ".venv" / ".errand-installed"
    before = stamp.stat().st_mtime_ns if stamp.exists() else None
    with open(ROOT / "scripts" / "setup") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        second = subprocess.Popen([str(ROOT / "scripts" / "setup")], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        try:
            assert second.stderr is not None
            assert second.stderr.readline() == "errand setup: waiting for another setup of this checkout to finish\n"
            assert second.poll() is None
            assert (stamp.stat().st_mtime_ns if stamp.exists() else None) == before
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
    assert second.wait(timeout=600) == 0, second.stderr.read()
