"""scripts/pip_index_args.py: scripts/setup installs with uv, which does not read pip's configuration;
it must look for packages where pip, configured as it is on this machine, would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "pip_index_args.py"


def uv_options(env: dict[str, str], *args: str) -> list[str]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    ran = subprocess.run([sys.executable, str(SCRIPT), *args], env={**clean, **env},
                         capture_output=True, text=True, timeout=120, check=True)
    return ran.stdout.split("\n")[:-1]


def test_pips_variables_become_uvs_options() -> None:
    options = uv_options({"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "https://mirror.test/simple",
                          "PIP_EXTRA_INDEX_URL": "https://a.test/simple https://b.test/simple",
                          "PIP_FIND_LINKS": "/srv/wheels", "PIP_TRUSTED_HOST": "a.test", "PIP_NO_INDEX": "1"})
    assert options == ["--index-strategy", "unsafe-best-match", "--index-url", "https://mirror.test/simple",
                       "--extra-index-url", "https://a.test/simple", "--extra-index-url", "https://b.test/simple",
                       "--find-links", "/srv/wheels", "--allow-insecure-host", "a.test", "--no-index"]


def test_a_variable_overrides_the_file_as_it_does_for_pip(tmp_path: Path) -> None:
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nindex-url = https://file.test/simple\nfind-links = /from/file\n"
                      "cert = /etc/file-ca.pem\n")
    options = uv_options({"PIP_CONFIG_FILE": str(config), "PIP_INDEX_URL": "https://env.test/simple"})
    assert options == ["--index-strategy", "unsafe-best-match", "--index-url", "https://env.test/simple",
                       "--find-links", "/from/file"]
    assert uv_options({"PIP_CONFIG_FILE": str(config)}, "--cert") == ["/etc/file-ca.pem"]


def test_pip_with_nothing_configured_leaves_uv_its_default_index() -> None:
    assert uv_options({"PIP_CONFIG_FILE": os.devnull}) == ["--index-strategy", "unsafe-best-match"]
    assert uv_options({"PIP_CONFIG_FILE": os.devnull}, "--cert") == [""]
