"""Image.debian(): the apt sources parser, id shifting, and a real mmdebstrap build.

The build tests download packages from the mirror this machine's apt is
configured with, so they are marked ``slow`` and ``network``. The parser tests
use made-up hosts in temporary files and never read /etc.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from errand import _settings
from errand.errors import BackendUnavailable, ConfigError, ImageBuildError
from errand.sandbox import Image, Sandbox
from errand.sandbox._images.debian import (
    AptSource,
    apt_sources,
    choose_mirror,
    debian_config,
    parse_deb822,
    parse_one_line,
    shift_ids,
)
from errand.sandbox._images.layers import ImageConfig, LayerStore

MAIN = "http://mirror.example/debian"
SECURITY = "http://mirror.example/debian-security"

DEB822 = f"""\
# the main archive
Types: deb deb-src
URIs: {MAIN}
Suites: bookworm bookworm-updates
Components: main non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: {SECURITY}
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""

THIRD_PARTY = """\
Types: deb
URIs: https://packages.example/node
Suites: nodistro
Components: main
Signed-By: /usr/share/keyrings/nodesource.gpg
"""

ONE_LINE = f"""\
# comments and blank lines are ignored

deb {SECURITY} bookworm-security main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {MAIN}/ bookworm main contrib
deb-src {MAIN} bookworm main
"""


def etc_apt(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "apt"
    (root / "sources.list.d").mkdir(parents=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


# ------------------------------------------------------------------ parser (no network)


def test_deb822_stanzas() -> None:
    sources = parse_deb822(DEB822 + "\n" + THIRD_PARTY, "x.sources")
    assert [s.uris for s in sources] == [(MAIN,), (SECURITY,), ("https://packages.example/node",)]
    main, security, third = sources
    assert main.types == ("deb", "deb-src")
    assert main.suites == ("bookworm", "bookworm-updates")
    assert main.components == ("main", "non-free-firmware")
    assert "debian-archive-keyring" in main.signed_by
    assert not main.security and security.security and not third.security


def test_deb822_multiline_fields_and_disabled_stanzas() -> None:
    text = f"""\
Types: deb
URIs: {MAIN}
Suites: bookworm
Components: main
Enabled: no

Types: deb
URIs: http://other.example/debian
 http://third.example/debian
Suites: bookworm
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 AAAA
 -----END PGP PUBLIC KEY BLOCK-----
"""
    disabled, inline = parse_deb822(text)
    assert not disabled.enabled
    assert inline.uris == ("http://other.example/debian", "http://third.example/debian")
    assert "BEGIN PGP" in inline.signed_by
    assert choose_mirror([disabled, inline], "bookworm") == ("http://other.example/debian", ("main",))


def test_one_line_entries() -> None:
    sources = parse_one_line(ONE_LINE, "sources.list")
    assert [(s.types, s.uris, s.suites) for s in sources] == [
        (("deb",), (SECURITY,), ("bookworm-security",)),
        (("deb",), (MAIN + "/",), ("bookworm",)),
        (("deb-src",), (MAIN,), ("bookworm",)),
    ]
    assert sources[1].components == ("main", "contrib")
    assert sources[1].signed_by == "/usr/share/keyrings/debian-archive-keyring.gpg"


def test_mirror_from_deb822_directory(tmp_path: Path) -> None:
    root = etc_apt(tmp_path, {"sources.list.d/debian.sources": DEB822,
                              "sources.list.d/node.sources": THIRD_PARTY})
    sources = apt_sources(root)
    assert len(sources) == 3
    # The security archive comes second in apt's order but would be wrong anyway;
    # non-Debian components are dropped.
    assert choose_mirror(sources, "bookworm") == (MAIN, ("main", "non-free-firmware"))
    # Another suite is served by the same archive.
    assert choose_mirror(sources, "trixie")[0] == MAIN


def test_mirror_from_one_line_sources_list(tmp_path: Path) -> None:
    root = etc_apt(tmp_path, {"sources.list": ONE_LINE})
    assert choose_mirror(apt_sources(root), "bookworm") == (MAIN, ("main", "contrib"))


def test_security_only_third_party_or_nothing_is_unavailable(tmp_path: Path) -> None:
    security_only = [s for s in parse_deb822(DEB822) if s.security]
    for sources in ([], security_only, parse_deb822(THIRD_PARTY),
                    parse_one_line("deb https://repo.example/apt bookworm stable\n")):
        with pytest.raises(BackendUnavailable, match="apt source"):
            choose_mirror(sources, "bookworm")
    assert apt_sources(tmp_path / "missing") == []


def test_listed_suite_ranks_before_apt_order() -> None:
    older = AptSource(("deb",), ("http://old.example/debian",), ("bullseye",), ("main",))
    newer = AptSource(("deb",), ("http://new.example/debian",), ("bookworm",), ("main",))
    assert choose_mirror([older, newer], "bookworm")[0] == "http://new.example/debian"
    assert choose_mirror([older, newer], "trixie")[0] == "http://old.example/debian"


def test_invalid_suite_is_refused() -> None:
    for suite in ("../x", "", "bookworm/../../etc", "a b"):
        with pytest.raises(ConfigError):
            Image.debian(suite)
    with pytest.raises(ConfigError):
        asyncio.run(debian_config(LayerStore(Path("/nonexistent")), "../x", print))


# ------------------------------------------------------------------ id shifting (root)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_shift_ids_keeps_modes_links_and_hardlinks(tmp_path: Path) -> None:
    base = 0x70000000
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    tool = root / "bin" / "tool"
    tool.write_text("#!/bin/sh\n")
    os.chown(tool, 0, 0)
    os.chmod(tool, 0o4755)
    shared = root / "bin" / "group-tool"
    shared.write_text("x")
    os.chown(shared, 0, 42)
    os.chmod(shared, 0o2755)
    os.link(shared, root / "bin" / "hardlink")
    owned = root / "owned"
    owned.write_text("x")
    os.chown(owned, 100, 101)
    os.symlink("/etc/does-not-exist", root / "dangling")
    os.symlink("bin", root / "bindir")
    shift_ids(root, base)

    def owner(path: Path) -> tuple[int, int]:
        info = path.lstat()
        return info.st_uid, info.st_gid

    assert owner(root) == (base, base)
    assert owner(tool) == (base, base)
    assert stat.S_IMODE(tool.lstat().st_mode) == 0o4755
    assert owner(shared) == (base, base + 42)  # shifted once despite two names
    assert stat.S_IMODE(shared.lstat().st_mode) == 0o2755
    assert owner(owned) == (base + 100, base + 101)
    assert owner(root / "dangling") == (base, base)
    assert owner(root / "bindir") == (base, base)


# ------------------------------------------------------------------ a real build

def real_build(test: Any) -> Any:
    """Marks for tests that run mmdebstrap and sandboxes: slow, network, root."""
    for mark in (pytest.mark.slow, pytest.mark.network,
                 pytest.mark.skipif(os.geteuid() != 0, reason="mmdebstrap and the namespace backend run as root"),
                 pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="needs mmdebstrap")):
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    lines: list[str] = []
    started = time.monotonic()
    config = Image.debian("bookworm").build(log=lines.append)
    return {"config": config, "lines": lines, "seconds": time.monotonic() - started}


@pytest.fixture(scope="module")
def sandbox(built: dict[str, Any]) -> Iterator[Any]:
    with Sandbox.create(image=Image.debian("bookworm"), timeout=600) as sb:
        yield sb


def run(sb: Any, *argv: str) -> str:
    result = sb.run(*argv, timeout=60)
    assert result.exit_code == 0, (argv, result.stdout, result.stderr)
    return str(result.stdout)


def tree_bytes(root: Path) -> int:
    total = 0
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            total += os.lstat(os.path.join(directory, name)).st_blocks * 512
    return total


@real_build
def test_build_config_and_layer(built: dict[str, Any]) -> None:
    config: ImageConfig = built["config"]
    store = LayerStore()
    layer = store.path(config.layers[0])
    assert config.key == config.layers[0] and config.layers[0].startswith("debian-bookworm-")
    assert config.kind == "rootfs" and config.binds == () and config.workdir == "/"
    assert dict(config.env) == {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                "HOME": "/root", "LANG": "C.UTF-8"}
    # mmdebstrap's own output was streamed, and it used this machine's configured mirror.
    assert any(line.startswith("I: ") for line in built["lines"])
    mirror, _ = choose_mirror(apt_sources(), "bookworm")
    assert mirror in (layer / "etc/apt/sources.list").read_text()
    # What bwrap supplies is not in the layer; the identity files are.
    assert list((layer / "dev").iterdir()) == [] and list((layer / "proc").iterdir()) == []
    assert (layer / "etc/resolv.conf").read_text() == ""
    assert (layer / "etc/hostname").read_text() == "sandbox\n"
    assert 'APT::Sandbox::User "root"' in (layer / "etc/apt/apt.conf.d/00errand-sandbox").read_text()
    # Ownership is on the sandbox's host range: root is `base`, group shadow is `base + 42`.
    base = _settings.sandbox_uid()
    assert (layer / "usr/bin/env").stat().st_uid == base
    assert (layer / "etc/shadow").stat().st_gid == base + 42
    assert not [p for p in store.layers.iterdir() if p.name.startswith(".partial-")]
    size = tree_bytes(layer)
    print(f"\nDebian bookworm minbase: built in {built['seconds']:.1f} s, {size / 2**20:.0f} MiB")
    assert size < 150 * 2**20, "the root is supposed to be minimal"


@real_build
def test_debian_release_inside(sandbox: Any) -> None:
    assert run(sandbox, "cat", "/etc/debian_version").startswith("12")
    assert "bookworm" in run(sandbox, "cat", "/etc/os-release")
    assert run(sandbox, "id", "-u").strip() == "0"
    assert "apt" in run(sandbox, "apt-get", "--version")
    assert "Status: install ok installed" in run(sandbox, "dpkg", "-s", "ca-certificates")
    assert run(sandbox, "sh", "-c", "echo $HOME $LANG").split() == ["/root", "C.UTF-8"]
    assert run(sandbox, "hostname").strip() == "sandbox"


@real_build
def test_ownership_and_setuid_inside(sandbox: Any) -> None:
    assert run(sandbox, "stat", "-c", "%u:%g", "/usr/bin/env").strip() == "0:0"
    assert run(sandbox, "stat", "-c", "%g", "/etc/shadow").strip() == "42"
    setuid = run(sandbox, "find", "/", "-xdev", "-perm", "-4000", "-type", "f").split()
    # minbase has passwd (passwd, su, chsh...) and util-linux's mount: setuid survives the shift.
    assert "/usr/bin/passwd" in setuid, setuid
    assert run(sandbox, "stat", "-c", "%a", "/usr/bin/passwd").strip() == "4755"


@real_build
def test_second_build_is_a_cache_hit(built: dict[str, Any]) -> None:
    lines: list[str] = []
    started = time.monotonic()
    # An explicit store skips the builder's in-process memo, so debian_config itself decides.
    config = Image.debian("bookworm").build(log=lines.append, store=LayerStore())
    assert time.monotonic() - started < 2
    assert config == built["config"]
    assert lines == ["CACHED DEBIAN bookworm"]


@real_build
def test_failed_build_raises_and_leaves_no_partial(tmp_path: Path) -> None:
    store = LayerStore(tmp_path)
    lines: list[str] = []
    with pytest.raises(ImageBuildError) as caught:
        asyncio.run(debian_config(store, "no-such-suite", lines.append))
    assert caught.value.step == "DEBIAN no-such-suite"
    assert caught.value.exit_code not in (None, 0)
    assert caught.value.log and caught.value.log.splitlines()[-1] in lines
    assert list(store.layers.iterdir()) == []


@real_build
def test_apt_install_on_top(built: dict[str, Any]) -> None:
    # Commands in a sandbox hold no capabilities; the root is prepared so apt still works.
    image = Image.debian("bookworm").apt_install("jq")
    image.build()
    with Sandbox.create(image=image) as sb:
        assert run(sb, "sh", "-c", "echo '{\"a\": 41}' | jq '.a + 1'").strip() == "42"
