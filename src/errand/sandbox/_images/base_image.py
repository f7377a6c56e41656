"""The base image: the host's programs, read-only, under a synthesized /etc.

Nothing of the host is visible in a sandbox but what an image or mount names.
The base layer names only the program directories (``/usr`` and, on hosts
without merged /usr, its kin) and copies from the host's /etc just what
programs need to run and that holds no secret: the alternatives symlinks,
CA certificates, the dynamic linker cache, OS release files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from errand.sandbox._images.layers import ImageConfig, LayerStore

__all__ = ["base_config"]

_PROGRAM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Copied from the host's /etc: everything here is public information.
_ETC_COPIES = ("alternatives", "ssl/certs", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "os-release",
               "debian_version", "localtime", "python3", "python3.11", "python3.12", "python3.13",
               "mime.types", "protocols", "services")
_PATH = "/opt/errand/python/bin:/opt/errand/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_ENV = (("PATH", _PATH), ("HOME", "/root"), ("LANG", "C.UTF-8"),
            ("PYTHONUSERBASE", "/opt/errand/python"))
_SYNTHESIZED = {
    "passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": "root:x:0:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    "hostname": "sandbox\n",
    "resolv.conf": "",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
}
_VERSION = "base-v1"


def base_config(store: LayerStore, uid: int) -> ImageConfig:
    manifest = _manifest(uid)
    key = hashlib.sha256(manifest.encode()).hexdigest()[:32]
    layer_id = f"base-{key}"
    if not store.has(layer_id):
        partial = store.partial()
        _fill(partial, uid)
        store.commit(partial, layer_id)
    binds = [("/usr", "/usr")] + [(f"/{d}", f"/{d}") for d in _PROGRAM_DIRS
                                  if os.path.isdir(f"/{d}") and not os.path.islink(f"/{d}")]
    return ImageConfig(key=layer_id, layers=(layer_id,), binds=tuple(binds), env=BASE_ENV, kind="base")


def _manifest(uid: int) -> str:
    """What the base layer would contain, cheaply: changes on the host make a new layer."""
    parts = [_VERSION, str(uid), repr(sorted(_SYNTHESIZED.items()))]
    for name in _PROGRAM_DIRS:
        path = f"/{name}"
        parts.append(f"{name}:{os.readlink(path) if os.path.islink(path) else os.path.isdir(path)}")
    for name in _ETC_COPIES:
        etc = Path("/etc") / name
        if etc.is_dir() and not etc.is_symlink():
            for entry in sorted(etc.rglob("*")):
                parts.append(f"{entry}:{_stamp(entry)}")
        elif os.path.lexists(etc):
            parts.append(f"{etc}:{_stamp(etc)}")
    return "\n".join(parts)


def _stamp(path: Path) -> str:
    if path.is_symlink():
        return "->" + os.readlink(path)
    info = path.stat()
    return f"{info.st_size}:{info.st_mtime_ns}:{oct(info.st_mode)}"


def _fill(root: Path, uid: int) -> None:
    for name, mode in (("etc", 0o755), ("tmp", 0o1777), ("var", 0o755), ("var/tmp", 0o1777), ("root", 0o700),
                       ("home", 0o755), ("run", 0o755), ("mnt", 0o755), ("usr", 0o755),
                       ("opt/errand/bin", 0o755), ("opt/errand/python", 0o755)):
        (root / name).mkdir(parents=True, exist_ok=True)
        os.chmod(root / name, mode)
    for name in _PROGRAM_DIRS:
        if os.path.islink(f"/{name}"):
            os.symlink(os.readlink(f"/{name}"), root / name)
        elif os.path.isdir(f"/{name}"):
            (root / name).mkdir()
    for name, text in _SYNTHESIZED.items():
        (root / "etc" / name).write_text(text)
    for name in _ETC_COPIES:
        source = Path("/etc") / name
        if os.path.lexists(source):
            (root / "etc" / name).parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-a", "--no-target-directory", str(source), str(root / "etc" / name)],
                           check=True, capture_output=True)
    if not os.path.lexists("/usr/bin/python") and os.path.exists("/usr/bin/python3"):
        os.symlink("/usr/bin/python3", root / "opt/errand/bin/python")
    # Everything belongs to the sandbox's root user (host uid `uid`).
    subprocess.run(["chown", "-R", "-h", f"{uid}:{uid}", str(root)], check=True)
    shutil.rmtree(root / "etc/ssl/private", ignore_errors=True)
