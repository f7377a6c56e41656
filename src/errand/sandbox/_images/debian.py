"""Debian roots built with mmdebstrap from the machine's own apt mirror.

``Image.debian("bookworm")`` resolves here. The mirror is whatever apt on this
machine already uses for the main Debian archive (read from its sources at run
time, never assumed), so an image builds wherever ``apt-get install`` works.
mmdebstrap runs as root in a private mount namespace (the mounts it makes for
maintainer scripts cannot outlive it) into a partial layer directory; the tree
is then trimmed of what a sandbox provides itself (``/dev``, ``/proc``,
``/sys``), its ids are shifted onto the sandbox's host range, and it is
committed as one layer. The layer id covers the suite, mirror, recipe, id base
and the month, so a root is rebuilt at most monthly and otherwise found at once.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import hashlib
import os
import re
import shutil
import signal
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from errand import _settings
from errand.errors import BackendUnavailable, ConfigError, ImageBuildError
from errand.sandbox._images.layers import ImageConfig, LayerStore

__all__ = ["AptSource", "apt_sources", "choose_mirror", "debian_config", "parse_deb822", "parse_one_line"]

LogSink = Callable[[str], None]

_RECIPE = "debian-v1"
_VARIANT = "minbase"
_INCLUDE = ("ca-certificates",)
# Persisted into the root (/etc/apt/apt.conf.d, /etc/dpkg/dpkg.cfg.d), so later
# apt_install() steps stay as lean as the root itself.
_APT_OPTIONS = ('APT::Install-Recommends "false"', 'APT::Install-Suggests "false"')
_DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/lintian/*",
    "path-exclude=/usr/share/linda/*",
)
# Sets up merged /usr the debootstrap way instead of installing usrmerge, which
# pulls in all of perl (about 50 MB) for a conversion a fresh root never needs.
_MERGED_USR_HOOK = Path("/usr/share/mmdebstrap/hooks/maybe-merged-usr")
_ENV = (("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"), ("HOME", "/root"),
        ("LANG", "C.UTF-8"))
# Commands in a sandbox run without capabilities, so apt cannot switch to its _apt
# user to download, nor use _apt-owned directories; the sandbox is the isolation.
_APT_SANDBOX = ("// errand: sandboxed commands hold no capabilities, so apt downloads as root\n"
                'APT::Sandbox::User "root";\n')
_APT_PARTIALS = ("var/lib/apt/lists/partial", "var/cache/apt/archives/partial")
_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
_SUITE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+-]*$")
_ID_RANGE = 65536  # in-sandbox ids 0..65535 are mapped
_LOG_TAIL = 200


# ------------------------------------------------------------------ apt sources

@dataclass(frozen=True)
class AptSource:
    """One apt source entry (a deb822 stanza or a one-line entry), as apt reads it."""

    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str = ""
    enabled: bool = True
    origin: str = ""  # the file it came from, for messages

    @property
    def security(self) -> bool:
        """Serves the security archive rather than the main one."""
        if any(s.endswith("-security") or s.endswith("/updates") for s in self.suites):
            return True
        return any(urlsplit(u).path.rstrip("/").endswith("-security") for u in self.uris)


def parse_deb822(text: str, origin: str = "") -> list[AptSource]:
    """The entries of a ``*.sources`` file (deb822: stanzas of ``Field: value``)."""
    sources: list[AptSource] = []
    for stanza in _stanzas(text):
        enabled = stanza.get("enabled", "yes").strip().lower() not in ("no", "false", "0")
        sources.append(AptSource(
            types=tuple(stanza.get("types", "").split()), uris=tuple(stanza.get("uris", "").split()),
            suites=tuple(stanza.get("suites", "").split()),
            components=tuple(stanza.get("components", "").split()),
            signed_by=stanza.get("signed-by", "").strip(), enabled=enabled, origin=origin))
    return sources


def _stanzas(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    field = ""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                stanzas.append(current)
            current, field = {}, ""
        elif line[0] in " \t":
            if field:  # a continuation line (multi-line values such as inline keys)
                current[field] += "\n" + line.strip()
        elif ":" in line:
            name, value = line.split(":", 1)
            field = name.strip().lower()
            current[field] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


_ONE_LINE = re.compile(r"^(?P<type>deb(?:-src)?)\s+(?:\[(?P<options>[^\]]*)\]\s*)?(?P<uri>\S+)\s+"
                       r"(?P<suite>\S+)(?P<components>(?:\s+\S+)*)\s*$")


def parse_one_line(text: str, origin: str = "") -> list[AptSource]:
    """The entries of a ``sources.list``-style file (``deb [options] uri suite components...``)."""
    sources: list[AptSource] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        match = _ONE_LINE.match(line)
        if not match:
            continue
        options = dict(o.split("=", 1) for o in (match["options"] or "").split() if "=" in o)
        sources.append(AptSource(
            types=(match["type"],), uris=(match["uri"],), suites=(match["suite"],),
            components=tuple(match["components"].split()), signed_by=options.get("signed-by", ""),
            enabled=options.get("enabled", "yes").lower() not in ("no", "false", "0"), origin=origin))
    return sources


def apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """Every source apt on this machine reads, in apt's order.

    ``etc_apt`` is apt's configuration directory: ``sources.list`` first, then
    ``sources.list.d/*.list`` and ``*.sources`` in name order. Unreadable files
    are skipped, as apt would complain about them rather than use them.
    """
    sources: list[AptSource] = []
    main = etc_apt / "sources.list"
    files: list[Path] = [main] if main.is_file() else []
    directory = etc_apt / "sources.list.d"
    if directory.is_dir():
        files += sorted(p for p in directory.iterdir()
                        if p.is_file() and p.suffix in (".list", ".sources"))
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        parse = parse_deb822 if path.suffix == ".sources" else parse_one_line
        sources += parse(text, str(path))
    return sources


def choose_mirror(sources: Iterable[AptSource], suite: str) -> tuple[str, tuple[str, ...]]:
    """The URI (and components) of the main Debian archive among ``sources``.

    A candidate is an enabled binary (``deb``) source with a ``main`` component
    that is not the security archive and looks like Debian's: it lists the suite
    asked for, is signed by a Debian keyring, or sits at the archive's customary
    ``/debian`` path. Listing the suite ranks first, then the Debian signals,
    then apt's own order.
    """
    ranked: list[tuple[tuple[bool, bool, int], str, tuple[str, ...]]] = []
    for index, source in enumerate(sources):
        if not source.enabled or "deb" not in source.types or "main" not in source.components:
            continue
        if source.security:
            continue
        lists_suite = suite in source.suites
        for uri in source.uris:
            scheme = urlsplit(uri).scheme
            if not scheme or scheme == "cdrom":
                continue
            debian = ("debian" in source.signed_by.lower()
                      or urlsplit(uri).path.rstrip("/").endswith("/debian"))
            if lists_suite or debian:
                ranked.append(((not lists_suite, not debian, index), uri.rstrip("/"), source.components))
    if not ranked:
        raise BackendUnavailable(
            "Image.debian() builds from the machine's own apt mirror, but no apt source here serves the main "
            "Debian archive (looked in sources.list and sources.list.d/*.list, *.sources); add one, e.g. a "
            "deb822 stanza with 'Types: deb', 'URIs: <your Debian mirror>', 'Suites: <suite>', "
            "'Components: main'", code="no_debian_mirror")
    ranked.sort(key=lambda item: item[0])
    _, uri, components = ranked[0]
    # Only what a Debian archive offers; third-party component names would fail the build.
    wanted = tuple(c for c in components if c in ("main", "contrib", "non-free", "non-free-firmware"))
    return uri, wanted or ("main",)


# ------------------------------------------------------------------ the build

async def debian_config(store: LayerStore, suite: str, log: LogSink) -> ImageConfig:
    """A minimal Debian ``suite`` root as a committed layer (built once a month, else cached)."""
    if not isinstance(suite, str) or not _SUITE.match(suite):
        raise ConfigError(f"not a Debian suite name: {suite!r}", code="invalid_image_step")
    mirror, components = choose_mirror(apt_sources(), suite)
    base = _settings.sandbox_uid()
    layer_id = _layer_id(suite, mirror, components, base)
    config = ImageConfig(key=layer_id, layers=(layer_id,), binds=(), env=_ENV, workdir="/", kind="rootfs")
    step = f"DEBIAN {suite}"
    if store.has(layer_id):
        log(f"CACHED {step}")
        return config
    _check_tools()
    log(f"STEP {step} from {mirror} ({' '.join(components)})")
    started = time.monotonic()
    partial = store.partial()
    try:
        await _mmdebstrap(partial, suite, mirror, components, step, log)
        await asyncio.to_thread(_finish_root, partial, base)
        store.commit(partial, layer_id)
    except BaseException:
        _remove_partial(partial)
        raise
    log(f"built {layer_id} in {time.monotonic() - started:.1f} s")
    return config


def _layer_id(suite: str, mirror: str, components: tuple[str, ...], base: int) -> str:
    month = datetime.datetime.now(datetime.UTC).strftime("%Y-%m")
    recipe = [_RECIPE, suite, mirror, ",".join(components), _VARIANT, str(base), os.uname().machine, month,
              *_INCLUDE, *_APT_OPTIONS, *_DPKG_OPTIONS, str(_MERGED_USR_HOOK.is_dir()), _APT_SANDBOX]
    digest = hashlib.sha256("\0".join(recipe).encode()).hexdigest()[:24]
    return f"debian-{suite}-{digest}"


def _check_tools() -> None:
    if shutil.which("mmdebstrap") is None:
        raise BackendUnavailable("Image.debian() needs mmdebstrap: apt-get install mmdebstrap",
                                 code="mmdebstrap_missing")
    if shutil.which("unshare") is None:
        raise BackendUnavailable("Image.debian() needs unshare (util-linux)", code="unshare_missing")
    if os.geteuid() != 0:
        raise BackendUnavailable("Image.debian() builds the root with mmdebstrap as root; run errand as root",
                                 code="needs_root")


def _mmdebstrap_argv(target: Path, suite: str, mirror: str, components: tuple[str, ...]) -> list[str]:
    # A private mount namespace: the /proc, /sys and /dev mounts mmdebstrap makes in
    # root mode vanish with it, even if it is killed, so the partial is safe to delete.
    argv = ["unshare", "--mount", "--propagation", "private", "--",
            "mmdebstrap", f"--variant={_VARIANT}", "--mode=root", "--format=directory",
            f"--components={','.join(components)}", f"--include={','.join(_INCLUDE)}"]
    if _MERGED_USR_HOOK.is_dir():
        argv.append(f"--hook-dir={_MERGED_USR_HOOK}")
    argv += [f"--aptopt={o}" for o in _APT_OPTIONS] + [f"--dpkgopt={o}" for o in _DPKG_OPTIONS]
    return [*argv, suite, str(target), mirror]


async def _mmdebstrap(target: Path, suite: str, mirror: str, components: tuple[str, ...], step: str,
                      log: LogSink) -> None:
    env = dict(os.environ)
    env["PATH"] = env.get("PATH", "") + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    process = await asyncio.create_subprocess_exec(
        *_mmdebstrap_argv(target, suite, mirror, components), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True)
    tail: collections.deque[str] = collections.deque(maxlen=_LOG_TAIL)
    try:
        assert process.stdout is not None
        pending = b""
        while chunk := await process.stdout.read(65536):
            *lines, pending = re.split(rb"\r\n|\r|\n", pending + chunk)
            for raw in lines:
                _emit(raw, tail, log)
        _emit(pending, tail, log)
        code = await process.wait()
    except BaseException:
        # Cancelled or interrupted: stop mmdebstrap (and its apt and dpkg) before the
        # partial directory is removed under them.
        if process.returncode is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await asyncio.shield(process.wait())
        raise
    if code != 0:
        raise ImageBuildError(f"mmdebstrap failed with exit code {code} building Debian {suite} from {mirror}",
                              step=step, log="\n".join(tail), exit_code=code)


def _emit(raw: bytes, tail: collections.deque[str], log: LogSink) -> None:
    line = raw.decode(errors="replace").rstrip()
    if line:
        tail.append(line)
        log(line)


# ------------------------------------------------------------------ after mmdebstrap

def _finish_root(root: Path, base: int) -> None:
    """Trim what a sandbox supplies itself, fit it to capability-less root, then shift ids to the sandbox range."""
    _refuse_mounts(root)
    for name in ("dev", "proc", "sys"):
        directory = root / name
        if directory.is_dir() and not directory.is_symlink():
            for entry in directory.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        else:
            directory.unlink(missing_ok=True)
            directory.mkdir()
        os.chmod(directory, 0o555 if name in ("proc", "sys") else 0o755)
    etc = root / "etc"
    for name, text in (("resolv.conf", ""), ("hostname", "sandbox\n")):
        (etc / name).unlink(missing_ok=True)  # mmdebstrap may leave a copy of the host's
        (etc / name).write_text(text)
        os.chmod(etc / name, 0o644)
    (etc / "apt/apt.conf.d/00errand-sandbox").write_text(_APT_SANDBOX)
    os.chmod(etc / "apt/apt.conf.d/00errand-sandbox", 0o644)
    for name in _APT_PARTIALS:
        if (root / name).is_dir():
            os.lchown(root / name, 0, 0)
    if not (etc / "hosts").exists():
        (etc / "hosts").write_text(_HOSTS)
        os.chmod(etc / "hosts", 0o644)
    os.chmod(root, 0o755)
    shift_ids(root, base)


def shift_ids(root: Path, base: int) -> None:
    """Own every file by ``base + id`` instead of ``id``, keeping modes and file capabilities.

    chown clears setuid/setgid bits and file capabilities, so both are put back.
    Symlinks are changed themselves, never followed; a hard-linked file is
    shifted once however many names it has.
    """
    seen: set[tuple[int, int]] = set()

    def shift(path: str, info: os.stat_result) -> None:
        if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
            key = (info.st_dev, info.st_ino)
            if key in seen:
                return
            seen.add(key)
        if info.st_uid >= _ID_RANGE or info.st_gid >= _ID_RANGE:
            raise ImageBuildError(f"{path} is owned by {info.st_uid}:{info.st_gid}, outside the ids a sandbox "
                                  "maps (0-65535)", step="DEBIAN ownership")
        capabilities = None
        if stat.S_ISREG(info.st_mode):
            try:
                capabilities = os.getxattr(path, "security.capability", follow_symlinks=False)
            except OSError:
                pass
        os.lchown(path, base + info.st_uid, base + info.st_gid)
        if stat.S_ISLNK(info.st_mode):
            return
        if info.st_mode & (stat.S_ISUID | stat.S_ISGID):
            os.chmod(path, stat.S_IMODE(info.st_mode))
        if capabilities is not None:
            os.setxattr(path, "security.capability", capabilities, follow_symlinks=False)

    top = str(root)
    shift(top, os.lstat(top))
    for directory, dirs, files in os.walk(top):
        for name in dirs + files:  # dirs holds symlinks to directories too; os.walk does not enter them
            path = os.path.join(directory, name)
            shift(path, os.lstat(path))


def _mounts_under(root: Path) -> list[str]:
    prefix = os.path.realpath(root)
    found = []
    try:
        with open("/proc/self/mountinfo") as mountinfo:
            for line in mountinfo:
                point = line.split()[4].encode().decode("unicode_escape")
                if point == prefix or point.startswith(prefix + "/"):
                    found.append(point)
    except OSError:
        pass
    return found


def _refuse_mounts(root: Path) -> None:
    mounts = _mounts_under(root)
    if mounts:
        raise ImageBuildError(f"something is still mounted in the new root: {', '.join(mounts)}",
                              step="DEBIAN cleanup")


def _remove_partial(partial: Path) -> None:
    if _mounts_under(partial):
        return  # never delete through a mount; `errand gc` retries once it is gone
    shutil.rmtree(partial, ignore_errors=True)
