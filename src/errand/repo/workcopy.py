"""Working copies: a fresh, self-contained checkout of one commit for an agent.

:meth:`WorkingCopy.prepare` never writes to the user's repository. It makes two
things:

* ``host_git`` — a bare copy of the source that only the host ever touches. For
  a local source it is a ``git clone --bare`` (git hard-links the object files,
  so it costs no copy and no disk; a cross-device clone copies). It holds the
  base commit under ``refs/errand/base`` and is the trusted object store that
  :func:`errand.repo.diff.diff_tree` diffs against.
* ``path`` — the checkout the sandbox mounts, with its own ``.git`` made with
  ``--no-hardlinks`` (the agent may write into its ``.git``; a shared inode
  would let it rewrite the host's objects), detached at the base commit, with
  no remote (the host path would mean nothing in the sandbox).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from errand.errors import ConfigError
from errand.repo import checkouts
from errand.repo.diff import Diff, build_index, diff_tree, scratch_git_dir
from errand.repo.errors import RepoError
from errand.repo.git import run_git

__all__ = ["WorkingCopy", "is_url", "resolve_base", "source_name"]

_URL = re.compile(r"^(?:file|https?|ssh|git)://[^\s]+$")
_SCP = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+$")  # git@host:owner/repo.git
_INDEX_SEED = "errand-index"


def is_url(source: str) -> bool:
    return bool(_URL.match(source) or _SCP.match(source))


def source_name(repo: str | Path) -> str:
    """How a task names its repository: a URL as given, a path made absolute."""
    return str(repo) if is_url(str(repo)) else str(Path(repo).expanduser().resolve())


def _check_ref_syntax(base: str) -> None:
    if not base or base.startswith("-") or any(c.isspace() or ord(c) < 32 for c in base):
        raise ConfigError(f"not a valid git ref: {base!r}", code="unknown_ref")


def _resolve(git_dir: Path, base: str, where: str) -> str:
    out = run_git(["rev-parse", "--verify", "--quiet", f"{base}^{{commit}}"], git_dir, git_dir=git_dir, check=False)
    sha = out.strip()
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", sha):
        raise ConfigError(f"unknown ref {base!r} in {where}: no commit by that name", code="unknown_ref")
    return sha


def _local_git_dir(path: Path) -> Path:
    if not path.is_dir():
        raise ConfigError(f"{path} is not a git repository (no such directory)", code="not_a_git_repo")
    out = run_git(["rev-parse", "--absolute-git-dir"], path, check=False).strip()
    if not out:
        raise ConfigError(f"{path} is not a git repository", code="not_a_git_repo")
    return Path(out)


def resolve_base(source: str | Path, base: str = "HEAD") -> str:
    """The commit ``base`` names in ``source`` now, without cloning anything.

    A local repository resolves every name git knows (``HEAD~2``, a tag, a
    remote-tracking branch); a URL only the refs it advertises (``git ls-remote``).
    Raises :class:`ConfigError` (``not_a_git_repo``, ``unknown_ref``, ``bad_url``).
    """
    _check_ref_syntax(base)
    if isinstance(source, Path) or not is_url(source):
        if isinstance(source, str) and "://" in source:
            raise ConfigError(f"unsupported git URL {source!r} (use file://, http(s)://, ssh://, git://)",
                              code="bad_url")
        git_dir = _local_git_dir(Path(source).expanduser().absolute())
        return _resolve(git_dir, base, str(source))
    if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", base):
        return base
    try:
        listing = run_git(["ls-remote", "--", str(source), base], Path.cwd())
    except RepoError as error:
        raise ConfigError(f"cannot read {source}: {error.stderr or error.message}", code="not_a_git_repo") from None
    for line in listing.splitlines():
        sha, _, name = line.partition("\t")
        if name in (base, f"refs/heads/{base}", f"refs/tags/{base}"):
            return sha
    raise ConfigError(f"unknown ref {base!r} in {source}: the remote has no branch or tag by that name",
                      code="unknown_ref")


@dataclass(frozen=True)
class WorkingCopy:
    source: str
    path: Path
    base_ref: str
    base_commit: str
    host_git: Path
    index_seed: Path | None = None  # default: host_git / "errand-index"
    overlay: bool = False  # an overlay on a shared pristine checkout (see errand.repo.checkouts)
    # Paths the diff leaves out: what a cached setup wrote into the tree that git does not ignore.
    diff_excludes: tuple[str, ...] = ()

    @property
    def object_mounts(self) -> list[Path]:
        """Host directories a sandbox must see (read-only, at the same path) for git to work
        in this checkout: the object store its ``.git`` borrows from."""
        return [self.host_git / "objects"] if self.overlay else []

    def to_json(self) -> dict[str, Any]:
        """Its fields as plain values (paths as strings), so another process can :meth:`from_json` it."""
        return {"source": self.source, "path": str(self.path), "base_ref": self.base_ref,
                "base_commit": self.base_commit, "host_git": str(self.host_git),
                "index_seed": str(self.index_seed) if self.index_seed is not None else None,
                "overlay": self.overlay, "diff_excludes": list(self.diff_excludes)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkingCopy:
        """The working copy :meth:`to_json` wrote (it is not checked or mounted again here)."""
        return cls(source=data["source"], path=Path(data["path"]), base_ref=data["base_ref"],
                   base_commit=data["base_commit"], host_git=Path(data["host_git"]),
                   index_seed=Path(data["index_seed"]) if data.get("index_seed") else None,
                   overlay=bool(data["overlay"]), diff_excludes=tuple(data.get("diff_excludes") or ()))

    @classmethod
    def overlaid(cls, source: str | Path, base: str = "HEAD", *, dest: Path, owner: int | None = None,
                 layers: Sequence[Path] = (), diff_excludes: Sequence[str] = ()) -> WorkingCopy:
        """Like :meth:`prepare`, but as an overlay on a cached pristine checkout of the base
        commit: the first working copy of a commit pays for the checkout, the next ones
        cost a mount. ``dest`` is the mount point; its upper and work directories are
        siblings (``<dest>.upper``, ``<dest>.work``). ``layers`` (host directories, the
        top first) lie between this copy's writes and the pristine tree: what a cached
        setup wrote into the tree; ``diff_excludes`` are the paths of it that git does
        not ignore, left out of :meth:`diff`. :meth:`remove` unmounts."""
        dest = Path(dest).absolute()
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise ConfigError(f"{dest} already exists and is not empty", code="dest_exists")
        entry, sha = _pristine_entry(source, base, owner)
        upper, work = dest.with_name(dest.name + ".upper"), dest.with_name(dest.name + ".work")
        wc = cls(source=str(source), path=dest, base_ref=base, base_commit=sha, host_git=entry / "host.git",
                 index_seed=dest.with_name(dest.name + ".index"), overlay=True,
                 diff_excludes=tuple(diff_excludes))
        try:
            upper.mkdir(parents=True, exist_ok=True)
            if owner is not None:
                # Before the mount: overlayfs copies the root's owner from the upper directory
                # when it mounts and checks access against that copy, so a chown afterwards
                # shows in `ls` but leaves the top directory closed to the sandbox (EACCES).
                os.lchown(upper, owner, owner)
            checkouts.mount_overlay([*layers, entry / "tree"], upper, work, dest)
            build_index(dest, wc.host_git, sha, wc.seed)
        except BaseException:
            wc.remove()
            raise
        return wc

    @staticmethod
    def pristine(source: str | Path, base: str = "HEAD", *, owner: int | None = None) -> tuple[Path, str]:
        """The cached pristine checkout of ``base`` (read-only to every sandbox: nothing an agent
        writes reaches it) and the commit it holds, made on first use as :meth:`overlaid` does.
        What shapes a round (its ``errand.toml``, instructions, lockfiles) is read from here."""
        entry, sha = _pristine_entry(source, base, owner)
        return entry / "tree", sha

    @staticmethod
    def tree_id(pristine_tree: Path) -> str:
        """The git tree id of the commit a :meth:`pristine` checkout holds (from the host's
        own copy of the repository, never from the checkout's ``.git``)."""
        host_git = pristine_tree.parent / "host.git"
        return run_git(["rev-parse", "--verify", "refs/errand/base^{tree}"], host_git, git_dir=host_git).strip()

    @property
    def base_tree(self) -> Path | None:
        """The pristine checkout of the base commit under an overlay (read-only to everyone:
        what an agent writes never reaches it); None for a plain checkout."""
        return self.host_git.parent / "tree" if self.overlay else None

    @property
    def seed(self) -> Path:
        return self.index_seed or self.host_git / _INDEX_SEED

    @classmethod
    def prepare(
        cls, source: str | Path, base: str = "HEAD", *, dest: Path, host_git: Path | None = None,
        owner: int | None = None,
    ) -> WorkingCopy:
        """Check ``base`` of ``source`` (a local repository or a git URL) out at ``dest``.

        ``dest`` must not exist (or be an empty directory). ``host_git`` (default:
        a sibling ``<dest>.host.git``) must be somewhere the sandbox cannot write.
        ``owner`` (a host uid) is given the checkout, so a sandbox mapped onto that
        uid can write it. Bad input raises :class:`ConfigError` (``not_a_git_repo``,
        ``unknown_ref``, ``bad_url``, ``dest_exists``) and leaves nothing behind.
        """
        dest = Path(dest).absolute()
        host_git = Path(host_git).absolute() if host_git is not None else dest.with_name(dest.name + ".host.git")
        _check_ref_syntax(base)
        for target in (dest, host_git):
            if target.exists() and (not target.is_dir() or any(target.iterdir())):
                raise ConfigError(f"{target} already exists and is not empty", code="dest_exists")
        local_sha: str | None = None
        if isinstance(source, Path) or not is_url(source):
            if isinstance(source, str) and "://" in source:
                raise ConfigError(f"unsupported git URL {source!r} (use file://, http(s)://, ssh://, git://)",
                                  code="bad_url")
            src_dir = _local_git_dir(Path(source).expanduser().absolute())
            # Resolve in the user's own repository so every ref they can name works
            # (origin/main, HEAD~2, a tag); a bare copy would not have all of them.
            local_sha = _resolve(src_dir, base, str(source))
            clone_from = str(src_dir)
        else:
            clone_from = str(source)
        created: list[Path] = [p for p in (dest, host_git) if not p.exists()]
        try:
            run_git(["clone", "--bare", "--quiet", "--template=", "--", clone_from, str(host_git)], dest.parent)
            sha = local_sha or _resolve(host_git, base, str(source))
            run_git(["update-ref", "refs/errand/base", sha], host_git, git_dir=host_git)
            cls._checkout(host_git, dest, sha)
            wc = cls(source=str(source), path=dest, base_ref=base, base_commit=sha, host_git=host_git)
            if owner is not None:
                _chown_tree(dest, owner)
            build_index(dest, host_git, sha, host_git / _INDEX_SEED)  # after chown: it records ctimes
            return wc
        except BaseException:
            for p in created:
                shutil.rmtree(p, ignore_errors=True)
            raise

    @staticmethod
    def _checkout(host_git: Path, dest: Path, sha: str) -> None:
        # --no-hardlinks: dest/.git is the agent's to write; it must share no inode with host_git.
        # Hooks off for the host-side checkout even though the template is empty.
        run_git(["clone", "--no-checkout", "--no-hardlinks", "--quiet", "--template=", "--",
                 str(host_git), str(dest)], dest.parent)
        git_dir = dest / ".git"
        run_git(["-c", "core.hooksPath=/dev/null", "checkout", "--quiet", "--detach", sha], dest,
                git_dir=git_dir, work_tree=dest)
        run_git(["remote", "remove", "origin"], dest, git_dir=git_dir)

    def apply(self, patch: str) -> None:
        """Apply ``patch`` (from an earlier :meth:`diff`) to the checkout: a follow-up
        starts from the work it follows. Raises :class:`RepoError` if it does not apply."""
        if not patch.strip():
            return
        owner = self.path.stat().st_uid
        with scratch_git_dir(self.host_git) as git_dir:
            run_git(["apply", "--whitespace=nowarn", "-"], self.path, untrusted=True, input=patch,
                    git_dir=git_dir, work_tree=self.path)
        if owner != 0:  # only what the patch made: a chown of every file would copy each one up
            for change in self.diff().files:
                _chown_created(self.path, change.path, owner)

    def diff(self) -> Diff:
        """What changed in the working copy since :attr:`base_commit` (see :func:`diff_tree`)."""
        return diff_tree(self.path, self.base_commit, objects_from=self.host_git, index_seed=self.seed,
                         excludes=self.diff_excludes)

    def remove(self) -> None:
        """Delete the checkout and the host copy (an overlay: unmount it and delete its
        layers; the shared pristine checkout stays)."""
        if self.overlay:
            checkouts.unmount(self.path)
            for p in (self.path, self.path.with_name(self.path.name + ".upper"),
                      self.path.with_name(self.path.name + ".work")):
                shutil.rmtree(p, ignore_errors=True)
            if self.index_seed is not None:
                self.index_seed.unlink(missing_ok=True)
            return
        for p in (self.path, self.host_git):
            shutil.rmtree(p, ignore_errors=True)



def _pristine_entry(source: str | Path, base: str, owner: int | None) -> tuple[Path, str]:
    sha = resolve_base(source, base)
    clone_from = str(source) if is_url(str(source)) else str(_local_git_dir(Path(source).expanduser().absolute()))

    def build(entry: Path, final: Path) -> None:
        host_git, tree = entry / "host.git", entry / "tree"
        run_git(["clone", "--bare", "--quiet", "--template=", "--", clone_from, str(host_git)], entry)
        run_git(["update-ref", "refs/errand/base", sha], host_git, git_dir=host_git)
        run_git(["clone", "--no-checkout", "--shared", "--quiet", "--template=", "--", str(host_git),
                 str(tree)], entry)
        run_git(["-c", "core.hooksPath=/dev/null", "checkout", "--quiet", "--detach", sha], tree,
                git_dir=tree / ".git", work_tree=tree)
        run_git(["remote", "remove", "origin"], tree, git_dir=tree / ".git")
        (tree / ".git/objects/info/alternates").write_text(f"{final / 'host.git' / 'objects'}\n")
        if owner is not None:
            _chown_tree(tree, owner)

    return checkouts.pristine(clone_from, sha, owner, build), sha


def _chown_created(root: Path, relative: str, uid: int) -> None:
    """Give ``uid`` a file the host made in the checkout, and the directories above it."""
    path = root / relative
    while path != root and root in path.parents:
        if os.path.lexists(path) and os.lstat(path).st_uid != uid:
            os.lchown(path, uid, uid)
        path = path.parent


def _chown_tree(root: Path, uid: int) -> None:
    os.lchown(root, uid, uid)
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(directory, name), uid, uid)
