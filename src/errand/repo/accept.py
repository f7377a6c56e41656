"""Accepting a diff: one commit on a new branch of the user's repository.

:func:`accept` applies the patch *text* — never anything from the agent's
working copy — and touches nothing in the user's repository but its object
store and the one new ref. It does this with plumbing on a temporary index
rather than a checkout:

* ``read-tree BASE`` into a temporary ``GIT_INDEX_FILE``, ``git apply --cached``
  the patch into it, ``write-tree``, ``commit-tree -p BASE``;
* ``update-ref refs/heads/BRANCH NEW ""`` — the empty old value makes the
  creation atomic: it fails if the branch appeared in the meantime.

None of these commands runs a hook, checks files out or runs a smudge filter,
so the current branch, ``HEAD``, the index and every worktree file are left
exactly as they were — and, unlike a temporary ``git worktree add``, nothing is
written under ``.git/worktrees`` and a large repository is not checked out.
"""

from __future__ import annotations

import os
import re
import tempfile
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from errand._text import printable
from errand.errors import ConfigError
from errand.repo.errors import RepoError
from errand.repo.git import run_git

__all__ = ["Signing", "accept", "branch_at", "branch_name", "slugify", "with_trailers", "write_commit"]

_AUTHOR = re.compile(r"^\s*([^<>\n]+?)\s*<([^<>\s]+)>\s*$")
_TRAILER_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,63}$")
_TRAILER_LINE = re.compile(r"^[A-Za-z][A-Za-z0-9-]*: \S")
_SIGNING_FORMATS = frozenset({"ssh", "openpgp", "x509"})
# No hook runs for plumbing; hooksPath is off anyway in case a future git adds one.
_HOOKS_OFF = ["-c", "core.hooksPath=/dev/null"]


def slugify(text: str, *, max_length: int = 40) -> str:
    """Lowercase ASCII words joined by dashes, at most ``max_length`` characters."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    return slug[:max_length].rstrip("-")


def branch_name(task_id: str, title: str) -> str:
    """``errand/<id>-<slug>`` for a task (``errand/<id>`` when the title has no usable characters)."""
    ident = re.sub(r"[^A-Za-z0-9_]+", "-", task_id).strip("-")
    if not ident:
        raise ConfigError(f"task id {task_id!r} has no characters usable in a branch name")
    slug = slugify(title)
    return f"errand/{ident}-{slug}" if slug else f"errand/{ident}"


def _git_dir(repo: Path) -> Path:
    out = run_git(["rev-parse", "--absolute-git-dir"], repo, check=False).strip() if repo.is_dir() else ""
    if not out:
        raise ConfigError(f"{repo} is not a git repository", code="not_a_git_repo")
    return Path(out)


@dataclass(frozen=True)
class Signing:
    """A key the host holds, to sign accepted commits with: ``key`` is a private key file
    (or a public one whose private half an ssh-agent holds) for ``ssh``, a key id for
    ``openpgp`` and ``x509``. Read from ``ERRAND_SIGNING_KEY`` / ``ERRAND_SIGNING_FORMAT``."""

    key: str
    format: str = "ssh"

    def __post_init__(self) -> None:
        if self.format not in _SIGNING_FORMATS:
            raise ConfigError(f"signing format {self.format!r}: use one of {', '.join(sorted(_SIGNING_FORMATS))}",
                              code="invalid_config")
        if not self.key.strip() or "\n" in self.key:
            raise ConfigError("a signing key is a file path or a key id", code="invalid_config")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Signing | None:
        environ = os.environ if environ is None else environ
        key = (environ.get("ERRAND_SIGNING_KEY") or "").strip()
        if not key:
            return None
        return cls(str(Path(key).expanduser()) if environ.get("ERRAND_SIGNING_FORMAT", "ssh") == "ssh" else key,
                   environ.get("ERRAND_SIGNING_FORMAT") or "ssh")

    def options(self) -> list[str]:
        return ["-c", f"gpg.format={self.format}", "-c", f"user.signingKey={self.key}"]


def accept(
    repo: Path, base_commit: str, patch: str, branch: str, message: str, *, author: str | None = None,
    trailers: Sequence[tuple[str, str]] = (), signing: Signing | None = None,
) -> str:
    """Commit ``patch`` on top of ``base_commit`` as new branch ``branch`` in ``repo``; return the commit sha.

    ``author`` is ``"Name <email>"``, author and committer both (default: the
    repository's configured user). ``trailers`` (``("Co-authored-by", "Name <email>")``)
    end the message; ``signing`` signs the commit. Control characters in ``message`` are shown
    as visible stand-ins (:func:`errand._text.printable`): it is the agent's
    summary, and ``git log`` in a terminal must not obey what it carries.
    Raises :class:`ConfigError` for a non-repository (``not_a_git_repo``), an
    unknown base (``unknown_ref``), a bad or existing branch (``bad_branch``,
    ``branch_exists``), an empty patch or message (``empty_patch``, ``empty_message``);
    :class:`RepoError` (``patch_failed``) when the patch does not apply, (``signing_failed``)
    when the key does not sign. Nothing is changed in any of those cases.
    """
    repo = Path(repo).absolute()
    git_dir = _git_dir(repo)
    _check_new_branch(repo, git_dir, branch)
    commit = write_commit(repo, base_commit, patch, message, author=author, trailers=trailers, signing=signing)
    branch_at(repo, branch, commit)
    return commit


def write_commit(
    repo: Path, base_commit: str, patch: str, message: str, *, author: str | None = None,
    trailers: Sequence[tuple[str, str]] = (), signing: Signing | None = None,
) -> str:
    """The commit :func:`accept` makes, written to the object store only (no ref points at it)."""
    repo = Path(repo).absolute()
    git_dir = _git_dir(repo)
    if not patch.strip():
        raise ConfigError("nothing to accept: the patch is empty", code="empty_patch")
    if not message.strip():
        raise ConfigError("a commit message is needed", code="empty_message")
    base = _commit_of(repo, git_dir, base_commit)
    extra = _identity(author)
    text = with_trailers(_safe(message), trailers)
    with tempfile.TemporaryDirectory(prefix="errand-accept-") as tmp:
        index = Path(tmp) / "index"

        def git(args: list[str], input: str | None = None, env: dict[str, str] | None = None) -> str:  # noqa: A002
            return run_git([*_HOOKS_OFF, *args], repo, git_dir=git_dir, index_file=index, input=input, env=env)

        git(["read-tree", base])
        try:
            git(["apply", "--cached", "--binary", "--whitespace=nowarn", "-"], input=patch)
        except RepoError as exc:
            raise RepoError(f"the patch does not apply to {base[:12]}: {exc.stderr}", command=exc.command,
                            stderr=exc.stderr, code="patch_failed") from exc
        tree = git(["write-tree"]).strip()
        sign = [*signing.options(), "commit-tree", "-S"] if signing is not None else ["commit-tree"]
        try:
            return git([*sign, tree, "-p", base, "-F", "-"], input=text, env=extra).strip()
        except RepoError as exc:
            if signing is None:
                raise
            raise RepoError(f"signing the commit with {signing.key} ({signing.format}) failed: {exc.stderr}",
                            command=exc.command, stderr=exc.stderr, code="signing_failed") from exc


def branch_at(repo: Path, branch: str, commit: str) -> None:
    """Create ``branch`` at ``commit``: atomically, failing if the branch appeared meanwhile."""
    repo = Path(repo).absolute()
    git_dir = _git_dir(repo)
    _check_new_branch(repo, git_dir, branch)
    try:
        run_git([*_HOOKS_OFF, "update-ref", "-m", f"errand: accept {commit[:12]}", f"refs/heads/{branch}", commit,
                 ""], repo, git_dir=git_dir)
    except RepoError as exc:
        raise ConfigError(f"branch {branch!r} could not be created: {exc.stderr}", code="branch_exists") from exc


def with_trailers(message: str, trailers: Sequence[tuple[str, str]]) -> str:
    """``message`` with ``Key: value`` trailers added to its closing trailer block (a new one when
    its last paragraph is prose), each once; a key or value that could break the block is refused."""
    lines = []
    for key, value in trailers:
        if not _TRAILER_KEY.match(key) or not value.strip() or any(ord(c) < 32 for c in value):
            raise ConfigError(f"not a commit trailer: {key!r}: {value!r}", code="bad_trailer")
        line = f"{key}: {value.strip()}"
        if line not in lines and line not in message.splitlines():
            lines.append(line)
    if not lines:
        return message
    body = message.rstrip("\n")
    last = body.rsplit("\n\n", 1)[-1].splitlines()
    joined = "\n" if last and all(_TRAILER_LINE.match(line) for line in last) and "\n\n" in body else "\n\n"
    return body + joined + "\n".join(lines) + "\n"


def _check_new_branch(repo: Path, git_dir: Path, branch: str) -> None:
    ref = f"refs/heads/{branch}"
    if branch.startswith("-") or not _valid_ref(repo, git_dir, ref):
        raise ConfigError(f"not a valid branch name: {branch!r}", code="bad_branch")
    if run_git(["rev-parse", "--verify", "--quiet", ref], repo, git_dir=git_dir, check=False).strip():
        raise ConfigError(f"branch {branch!r} already exists in {repo}; choose another name or delete it",
                          code="branch_exists")


def _commit_of(repo: Path, git_dir: Path, ref: str) -> str:
    base = run_git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], repo, git_dir=git_dir,
                   check=False).strip()
    if not base:
        raise ConfigError(f"unknown ref {ref!r}: the base commit is not in {repo}", code="unknown_ref")
    return base


def _identity(author: str | None) -> dict[str, str]:
    if author is None:
        return {}
    m = _AUTHOR.match(author)
    if not m:
        raise ConfigError(f"author must look like 'Name <email>', got {author!r}")
    return {"GIT_AUTHOR_NAME": m.group(1), "GIT_AUTHOR_EMAIL": m.group(2),
            "GIT_COMMITTER_NAME": m.group(1), "GIT_COMMITTER_EMAIL": m.group(2)}


def _safe(message: str) -> str:
    """The message with Windows line ends made plain and every other control character shown."""
    return printable(message.replace("\r\n", "\n"))


def _valid_ref(repo: Path, git_dir: Path, ref: str) -> bool:
    try:
        run_git(["check-ref-format", ref], repo, git_dir=git_dir)
    except RepoError:
        return False
    return True
