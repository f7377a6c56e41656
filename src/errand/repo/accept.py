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

import re
import tempfile
import unicodedata
from pathlib import Path

from errand._text import printable
from errand.errors import ConfigError
from errand.repo.errors import RepoError
from errand.repo.git import run_git

__all__ = ["accept", "branch_name", "slugify"]

_AUTHOR = re.compile(r"^\s*([^<>\n]+?)\s*<([^<>\s]+)>\s*$")


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


def accept(
    repo: Path, base_commit: str, patch: str, branch: str, message: str, *, author: str | None = None
) -> str:
    """Commit ``patch`` on top of ``base_commit`` as new branch ``branch`` in ``repo``; return the commit sha.

    ``author`` is ``"Name <email>"``, author and committer both (default: the
    repository's configured user). Control characters in ``message`` are shown
    as visible stand-ins (:func:`errand._text.printable`): it is the agent's
    summary, and ``git log`` in a terminal must not obey what it carries.
    Raises :class:`ConfigError` for a non-repository (``not_a_git_repo``), an
    unknown base (``unknown_ref``), a bad or existing branch (``bad_branch``,
    ``branch_exists``), an empty patch or message (``empty_patch``, ``empty_message``);
    :class:`RepoError` (``patch_failed``) when the patch does not apply. Nothing
    is changed in any of those cases.
    """
    repo = Path(repo).absolute()
    git_dir = _git_dir(repo)
    if not patch.strip():
        raise ConfigError("nothing to accept: the patch is empty", code="empty_patch")
    if not message.strip():
        raise ConfigError("a commit message is needed", code="empty_message")
    ref = f"refs/heads/{branch}"
    if branch.startswith("-") or not _valid_ref(repo, git_dir, ref):
        raise ConfigError(f"not a valid branch name: {branch!r}", code="bad_branch")
    base = run_git(["rev-parse", "--verify", "--quiet", f"{base_commit}^{{commit}}"], repo, git_dir=git_dir,
                   check=False).strip()
    if not base:
        raise ConfigError(f"unknown ref {base_commit!r}: the base commit is not in {repo}", code="unknown_ref")
    if run_git(["rev-parse", "--verify", "--quiet", ref], repo, git_dir=git_dir, check=False).strip():
        raise ConfigError(f"branch {branch!r} already exists in {repo}; choose another name or delete it",
                          code="branch_exists")
    extra: dict[str, str] = {}
    if author is not None:
        m = _AUTHOR.match(author)
        if not m:
            raise ConfigError(f"author must look like 'Name <email>', got {author!r}")
        extra = {"GIT_AUTHOR_NAME": m.group(1), "GIT_AUTHOR_EMAIL": m.group(2),
                 "GIT_COMMITTER_NAME": m.group(1), "GIT_COMMITTER_EMAIL": m.group(2)}
    # No hook runs for plumbing; hooksPath is off anyway in case a future git adds one.
    hooks_off = ["-c", "core.hooksPath=/dev/null"]
    with tempfile.TemporaryDirectory(prefix="errand-accept-") as tmp:
        index = Path(tmp) / "index"

        def git(args: list[str], input: str | None = None, env: dict[str, str] | None = None) -> str:  # noqa: A002
            return run_git([*hooks_off, *args], repo, git_dir=git_dir, index_file=index, input=input, env=env)

        git(["read-tree", base])
        try:
            git(["apply", "--cached", "--binary", "--whitespace=nowarn", "-"], input=patch)
        except RepoError as exc:
            raise RepoError(f"the patch does not apply to {base[:12]}: {exc.stderr}", command=exc.command,
                            stderr=exc.stderr, code="patch_failed") from exc
        tree = git(["write-tree"]).strip()
        commit = git(["commit-tree", tree, "-p", base, "-F", "-"], input=_safe(message), env=extra).strip()
    try:
        run_git([*hooks_off, "update-ref", "-m", f"errand: accept onto {base[:12]}", ref, commit, ""], repo,
                git_dir=git_dir)
    except RepoError as exc:
        raise ConfigError(f"branch {branch!r} could not be created: {exc.stderr}", code="branch_exists") from exc
    return commit


def _safe(message: str) -> str:
    """The message with Windows line ends made plain and every other control character shown."""
    return printable(message.replace("\r\n", "\n"))


def _valid_ref(repo: Path, git_dir: Path, ref: str) -> bool:
    try:
        run_git(["check-ref-format", ref], repo, git_dir=git_dir)
    except RepoError:
        return False
    return True
