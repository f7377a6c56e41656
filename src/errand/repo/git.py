"""A tiny runner for the ``git`` command line, with an *untrusted* mode.

errand never imports a git library: every git operation is a ``git`` process.
Most of them run in places the host owns (the user's repository, a bare copy of
it). Some must look at a directory an agent has written to — its working copy,
``.git/`` included — and there git must not obey anything the agent planted.
``run_git(..., untrusted=True)`` is that mode; see :data:`UNTRUSTED_CONFIG` and
:func:`_environment` for what it turns off and why.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from errand.repo.errors import RepoError

__all__ = ["UNTRUSTED_CONFIG", "diff_header_paths", "run_git", "unquote_path"]

# Each pair becomes ``git -c KEY=VALUE``. Command-line configuration outranks
# every config file git reads — including the config of any *other* repository
# git opens in-process (an embedded repo the agent planted in a sub-directory)
# and of child git processes (passed on through GIT_CONFIG_PARAMETERS).
UNTRUSTED_CONFIG: tuple[tuple[str, str], ...] = (
    # Hooks are programs; a planted hooks/ dir or core.hooksPath would run them.
    ("core.hooksPath", "/dev/null"),
    # core.fsmonitor names a program git runs on every index refresh
    # (``git add``, ``git status``, ``git diff``): the classic planted-.git RCE.
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    # Transports: a local diff needs none, so allow none. This also stops
    # ``ext::`` URLs, submodule fetches and lazy (promisor) fetches, and with
    # them core.sshCommand / core.gitProxy, which we blank as well.
    ("protocol.allow", "never"),
    ("core.sshCommand", ""),
    ("core.gitProxy", ""),
    ("credential.helper", ""),
    ("core.askPass", ""),
    # diff.external and pagers are programs too; diffs also pass --no-ext-diff
    # and --no-textconv so no diff driver (diff.<name>.command/.textconv) runs.
    ("diff.external", ""),
    ("core.pager", "cat"),
    # User-level attribute and ignore files live in $XDG_CONFIG_HOME even with
    # GIT_CONFIG_GLOBAL unset; keep the result independent of them.
    ("core.attributesFile", "/dev/null"),
    ("core.excludesFile", "/dev/null"),
    # Byte-exact content: no end-of-line conversion on the way into the index.
    ("core.autocrlf", "false"),
    ("core.safecrlf", "false"),
    ("core.symlinks", "true"),
    # No background maintenance processes.
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("submodule.recurse", "false"),
    ("color.ui", "false"),
)

# Variables that tell git *which* repository, index or object store to use;
# inherited from our caller they would silently redirect even host-owned
# commands. (The list ``git rev-parse --local-env-vars`` prints, and a few more.)
_LOCATION_VARS = frozenset(
    {
        "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
        "GIT_OBJECT_DIRECTORY", "GIT_DIR", "GIT_WORK_TREE", "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE",
        "GIT_INDEX_FILE", "GIT_NO_REPLACE_OBJECTS", "GIT_REPLACE_REF_BASE", "GIT_PREFIX",
        "GIT_INTERNAL_SUPER_PREFIX", "GIT_SHALLOW_FILE", "GIT_COMMON_DIR", "GIT_NAMESPACE",
        "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM", "GIT_EXTERNAL_DIFF",
        "GIT_DIFF_OPTS", "GIT_PAGER", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "GIT_TRACE",
    }
)


def _environment(
    *, untrusted: bool, git_dir: Path | None, work_tree: Path | None, index_file: Path | None,
    extra: Mapping[str, str] | None,
) -> dict[str, str]:
    if untrusted:
        # Nothing GIT_* from our caller: GIT_EXTERNAL_DIFF, GIT_SSH_COMMAND,
        # GIT_CONFIG_COUNT/KEY_n/VALUE_n, GIT_ASKPASS … each can name a program.
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        # No system or global config file: only our -c settings and the config
        # of the host-owned GIT_DIR apply (filters, diff drivers, aliases and
        # includes all come from config files).
        env["GIT_CONFIG_NOSYSTEM"] = "1"
        env["GIT_CONFIG_GLOBAL"] = "/dev/null"
        # No /etc/gitattributes either (macros there could name filters).
        env["GIT_ATTR_NOSYSTEM"] = "1"
        # refs/replace could make the base commit look like another one.
        env["GIT_NO_REPLACE_OBJECTS"] = "1"
    else:
        env = {k: v for k, v in os.environ.items() if k not in _LOCATION_VARS}
    env["GIT_TERMINAL_PROMPT"] = "0"  # never block on a credential prompt
    env["GIT_PAGER"] = "cat"
    env["LC_ALL"] = "C"  # stable messages
    if git_dir is not None:
        env["GIT_DIR"] = str(git_dir)
    if work_tree is not None:
        env["GIT_WORK_TREE"] = str(work_tree)
    if index_file is not None:
        env["GIT_INDEX_FILE"] = str(index_file)
    if extra:
        env.update(extra)
    return env


def run_git(
    args: Sequence[str],
    cwd: Path | str,
    *,
    untrusted: bool = False,
    input: str | None = None,  # noqa: A002 - mirrors subprocess.run
    git_dir: Path | None = None,
    work_tree: Path | None = None,
    index_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> str:
    """Run ``git ARGS`` in ``cwd`` and return its stdout (raises :class:`RepoError` on failure).

    With ``untrusted=True`` the repository must be named explicitly by
    ``git_dir`` (a host-owned directory; the work tree's own ``.git`` is never
    discovered or read), and git runs with no system/global config, no hooks,
    no fsmonitor, no transports, no external diff or pager (see
    :data:`UNTRUSTED_CONFIG`). Output is decoded with ``surrogateescape`` so
    non-UTF-8 bytes survive a round trip back into ``input``.
    """
    if untrusted and git_dir is None:
        raise ValueError("run_git(untrusted=True) needs an explicit, host-owned git_dir")
    argv = ["git", "--no-pager"]
    if untrusted:
        for key, value in UNTRUSTED_CONFIG:
            argv += ["-c", f"{key}={value}"]
    argv += list(args)
    proc = subprocess.run(
        argv,
        cwd=str(cwd),
        input=None if input is None else input.encode("utf-8", "surrogateescape"),
        stdin=subprocess.DEVNULL if input is None else None,
        capture_output=True,
        env=_environment(untrusted=untrusted, git_dir=git_dir, work_tree=work_tree, index_file=index_file,
                         extra=env),
        check=False,
    )
    stdout = proc.stdout.decode("utf-8", "surrogateescape")
    if check and proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", "replace").strip()
        shown = " ".join(args)
        raise RepoError(f"git {shown} failed (exit {proc.returncode}): {stderr}", command=argv, stderr=stderr)
    return stdout


# ------------------------------------------------------------------ paths as a diff prints them

_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_HEADER = re.compile(rf"^diff --git ({_QUOTED}|a/.*?) ({_QUOTED}|b/.*)$")


def unquote_path(text: str) -> str:
    """A path as git prints it in a diff: C-quoted (``"t\\303\\251st.py"``) when it holds a byte git
    will not print as it is (non-ASCII, a tab, a quote, a backslash), else as it is."""
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return text
    body, out, index = text[1:-1], bytearray(), 0
    while index < len(body):
        char = body[index]
        if char == "\\" and index + 1 < len(body):
            following = body[index + 1]
            if following in _ESCAPES:
                out.append(_ESCAPES[following])
                index += 2
                continue
            digits = body[index + 1:index + 4]
            if len(digits) == 3 and all(d in "01234567" for d in digits):
                out.append(int(digits, 8))
                index += 4
                continue
        out += char.encode("utf-8", "surrogateescape")
        index += 1
    return out.decode("utf-8", "surrogateescape")


def diff_header_paths(header: str) -> tuple[str, str] | None:
    """The old and new paths of a ``diff --git`` line, quoted or not, without their a/ and b/."""
    match = _HEADER.match(header)
    if match is None:
        return None
    old, new = (unquote_path(token) for token in match.groups())
    return old.removeprefix("a/"), new.removeprefix("b/")
