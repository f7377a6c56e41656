from __future__ import annotations

import secrets
import stat
import subprocess
from pathlib import Path

import pytest
from repohelpers import BINARY, git, user_state

from errand.errors import ConfigError
from errand.repo.accept import Signing, accept, branch_name, slugify
from errand.repo.errors import RepoError
from errand.repo.workcopy import WorkingCopy


def _make_change(user_repo: Path, tmp_path: Path) -> WorkingCopy:
    wc = WorkingCopy.prepare(user_repo, dest=tmp_path / "wc")
    (wc.path / "src/app.py").write_text("def add(a, b):\n    return a + b\n")
    (wc.path / "tests").mkdir()
    (wc.path / "tests/test_app.py").write_text("from src.app import add\n\nassert add(1, 2) == 3\n")
    (wc.path / "old.txt").unlink()
    (wc.path / "logo.bin").write_bytes(BINARY[::-1])
    return wc


def test_accept_creates_one_commit_and_leaves_user_checkout_byte_identical(user_repo: Path, tmp_path: Path) -> None:
    wc = _make_change(user_repo, tmp_path)
    diff = wc.diff()
    before = user_state(user_repo)
    sha = accept(user_repo, wc.base_commit, diff.text, "errand/7-fix-add", "Fix add\n\nIt subtracted.",
                 author="Errand Agent <agent@example.com>")
    assert user_state(user_repo) | {"refs": None} == before | {"refs": None}
    assert git(user_repo, "rev-parse", "refs/heads/errand/7-fix-add").strip() == sha
    assert git(user_repo, "rev-list", "--count", f"{wc.base_commit}..{sha}").strip() == "1"
    assert git(user_repo, "rev-parse", f"{sha}^").strip() == wc.base_commit
    assert git(user_repo, "log", "-1", "--format=%an <%ae>%n%B", sha).startswith(
        "Errand Agent <agent@example.com>\nFix add\n\nIt subtracted.")
    # The branch's tree is exactly the working copy's files.
    files = git(user_repo, "ls-tree", "-r", "--name-only", sha).split()
    assert sorted(files) == sorted([".gitignore", "README.md", "logo.bin", "src/app.py", "tests/test_app.py"])
    for name in files:
        shown = subprocess.run(["git", "show", f"{sha}:{name}"], cwd=user_repo, capture_output=True, check=True)
        assert shown.stdout == (wc.path / name).read_bytes(), name
    # Only the new branch was added to the refs.
    new_refs = set(user_state(user_repo)["refs"].splitlines()) - set(before["refs"].splitlines())
    assert new_refs == {f"refs/heads/errand/7-fix-add {sha}"}


def test_accept_existing_branch_fails_and_changes_nothing(user_repo: Path, tmp_path: Path) -> None:
    wc = _make_change(user_repo, tmp_path)
    diff = wc.diff()
    git(user_repo, "branch", "errand/taken", "v1")
    before = user_state(user_repo)
    objects_before = git(user_repo, "count-objects", "-v")
    with pytest.raises(ConfigError) as info:
        accept(user_repo, wc.base_commit, diff.text, "errand/taken", "msg")
    assert info.value.code == "branch_exists"
    assert "errand/taken" in info.value.message and "already exists" in info.value.message
    assert user_state(user_repo) == before
    assert git(user_repo, "count-objects", "-v") == objects_before


def test_accept_patch_that_does_not_apply(user_repo: Path, tmp_path: Path) -> None:
    wc = _make_change(user_repo, tmp_path)
    (wc.path / "README.md").write_text("edited\n")  # the hunk's context ("second commit") is not in v1
    before = user_state(user_repo)
    v1 = git(user_repo, "rev-parse", "v1").strip()
    with pytest.raises(RepoError) as info:
        accept(user_repo, v1, wc.diff().text, "errand/x", "msg")
    assert info.value.code == "patch_failed"
    assert "README.md" in info.value.message
    assert user_state(user_repo) == before


def test_accept_bad_inputs(user_repo: Path, tmp_path: Path) -> None:
    wc = _make_change(user_repo, tmp_path)
    patch = wc.diff().text
    cases = [
        (dict(repo=tmp_path / "wc-not-here", base_commit=wc.base_commit, branch="errand/a"), "not_a_git_repo"),
        (dict(repo=user_repo, base_commit="f" * 40, branch="errand/a"), "unknown_ref"),
        (dict(repo=user_repo, base_commit=wc.base_commit, branch="bad..name"), "bad_branch"),
        (dict(repo=user_repo, base_commit=wc.base_commit, branch="-x"), "bad_branch"),
    ]
    before = user_state(user_repo)
    for kwargs, code in cases:
        with pytest.raises(ConfigError) as info:
            accept(patch=patch, message="m", **kwargs)  # type: ignore[arg-type]
        assert info.value.code == code
    with pytest.raises(ConfigError) as info:
        accept(user_repo, wc.base_commit, "", "errand/a", "m")
    assert info.value.code == "empty_patch"
    assert user_state(user_repo) == before


def test_branch_name() -> None:
    assert branch_name("42", "Fix the failing test in parser!") == "errand/42-fix-the-failing-test-in-parser"
    assert branch_name("a1b2", "Crème brûlée — naïve café") == "errand/a1b2-creme-brulee-naive-cafe"
    long = branch_name("9", "word " * 30)
    slug = long.removeprefix("errand/9-")
    assert len(slug) <= 40 and not slug.endswith("-") and slug.startswith("word-word")
    assert branch_name("9", "!!!") == "errand/9"
    assert len(slugify("x" * 100)) == 40
    for name in (branch_name("t/../1", "a..b"), long):
        git_ok = subprocess.run(["git", "check-ref-format", f"refs/heads/{name}"], check=False)
        assert git_ok.returncode == 0, name


# --- planted-.git attacks ------------------------------------------------------------------------

HOOKS = ("pre-commit", "post-commit", "post-checkout", "pre-auto-gc", "post-index-change", "reference-transaction",
         "prepare-commit-msg", "commit-msg", "post-rewrite", "pre-applypatch", "post-applypatch")


def _plant(wc: Path, tmp_path: Path) -> tuple[list[Path], Path]:
    tag = secrets.token_hex(6)
    markers = [tmp_path / f"pwned-{tag}-{what}" for what in ("fsmonitor", "hook", "hookspath", "diff", "textconv",
                                                             "clean", "external", "pager", "nested")]
    m = {p.name.rsplit("-", 1)[1]: p for p in markers}
    evil_hooks = wc / ".git/evil-hooks"
    evil_hooks.mkdir()
    for hooks_dir, marker in ((wc / ".git/hooks", m["hook"]), (evil_hooks, m["hookspath"])):
        hooks_dir.mkdir(exist_ok=True)
        for hook in HOOKS:
            script = hooks_dir / hook
            script.write_text(f"#!/bin/sh\ntouch {marker}\n")
            script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    cfg = wc / ".git/config"
    with cfg.open("a") as f:
        f.write(f"""
[core]
\tfsmonitor = touch {m['fsmonitor']}; echo
\thooksPath = {evil_hooks}
\tpager = touch {m['pager']}; cat
[diff]
\texternal = touch {m['external']}
[diff "evil"]
\tcommand = touch {m['diff']}
\ttextconv = touch {m['textconv']}; cat
[filter "evil"]
\tclean = touch {m['clean']}; cat
\tsmudge = touch {m['clean']}; cat
\trequired = true
""")
    (wc / ".gitattributes").write_text("* diff=evil filter=evil text eol=crlf\n")
    # An embedded repository whose own config names an fsmonitor.
    nested = wc / "vendor/lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    git(nested, "config", "core.fsmonitor", f"touch {m['nested']}; echo")
    (nested / "lib.txt").write_text("nested\n")
    return markers, m["fsmonitor"]


def test_planted_git_does_not_run_on_host(user_repo: Path, tmp_path: Path) -> None:
    wc = _make_change(user_repo, tmp_path)
    (wc.path / "src/app.py").write_text("def add(a, b):\r\n    return a + b\r\n")  # CRLF stays CRLF
    markers, fsmonitor_marker = _plant(wc.path, tmp_path)

    diff = wc.diff()
    assert diff.skipped == ["vendor/lib"]
    paths = {f.path: f.status for f in diff.files}
    assert paths[".gitattributes"] == "added" and "vendor/lib" not in paths
    assert not any(p.startswith(".git/") for p in paths)
    before = user_state(user_repo)
    sha = accept(user_repo, wc.base_commit, diff.text, "errand/1-attack", "attack")
    assert user_state(user_repo) | {"refs": None} == before | {"refs": None}
    app = subprocess.run(["git", "show", f"{sha}:src/app.py"], cwd=user_repo, capture_output=True, check=True)
    assert app.stdout == b"def add(a, b):\r\n    return a + b\r\n"

    fired = [p.name for p in markers if p.exists()]
    assert fired == [], f"planted commands ran on the host: {fired}"

    # Control: the plant is live — naive host-side git in the working copy would have run it.
    subprocess.run(["git", "status", "--porcelain"], cwd=wc.path, capture_output=True, check=False)
    assert fsmonitor_marker.exists()


def test_accept_shows_control_characters_of_the_message_instead_of_committing_them(user_repo: Path,
                                                                                    tmp_path: Path) -> None:
    wc = _make_change(user_repo, tmp_path)
    message = "Fix add\x1b[2J\x1b]8;;https://e.test/\x07\r\n\r\nIt \u202esubtracted\x9b1A.\x00\n"
    sha = accept(user_repo, wc.base_commit, wc.diff().text, "errand/8-escapes", message)
    committed = subprocess.run(["git", "cat-file", "commit", sha], cwd=user_repo, capture_output=True,
                               check=True).stdout.decode().split("\n\n", 1)[1]
    assert committed == "Fix add␛[2J␛]8;;https://e.test/␇\n\nIt <U+202E>subtracted<U+009B>1A.␀\n"


def test_trailers_close_the_message_and_a_host_key_signs_the_commit(user_repo: Path, tmp_path: Path) -> None:
    wc = _make_change(user_repo, tmp_path)
    key = tmp_path / "signing"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "errand", "-f", str(key)], check=True)
    signing = Signing.from_environment({"ERRAND_SIGNING_KEY": str(key)})
    assert signing is not None
    sha = accept(user_repo, wc.base_commit, wc.diff().text, "errand/8-signed", "Fix add\n\nerrand-task: t-8\n",
                 author="errand <errand@localhost>", signing=signing,
                 trailers=[("Co-authored-by", "octo <1+octo@users.noreply.example.com>")])
    message = git(user_repo, "log", "-1", "--format=%B", sha)
    assert message.rstrip().endswith("errand-task: t-8\nCo-authored-by: octo <1+octo@users.noreply.example.com>")
    parsed = git(user_repo, "log", "-1", "--format=%(trailers:key=Co-authored-by,valueonly)", sha).strip()
    assert parsed == "octo <1+octo@users.noreply.example.com>"  # git itself reads it as a trailer
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("errand@localhost namespaces=\"git\" " + key.with_suffix(".pub").read_text())
    verified = subprocess.run(["git", "-c", f"gpg.ssh.allowedSignersFile={allowed}", "verify-commit", sha],
                              cwd=user_repo, capture_output=True, text=True)
    assert verified.returncode == 0 and 'Good "git" signature for errand@localhost' in verified.stderr
    unsigned = accept(user_repo, wc.base_commit, wc.diff().text, "errand/9-unsigned", "Fix add")
    assert subprocess.run(["git", "verify-commit", unsigned], cwd=user_repo, capture_output=True).returncode != 0


def test_a_trailer_that_would_break_the_message_is_refused_and_nothing_is_written(user_repo: Path,
                                                                                   tmp_path: Path) -> None:
    wc = _make_change(user_repo, tmp_path)
    before = user_state(user_repo)
    with pytest.raises(ConfigError) as info:
        accept(user_repo, wc.base_commit, wc.diff().text, "errand/10-x", "Fix add",
               trailers=[("Co-authored-by", "x <x@example.com>\nSigned-off-by: someone")])
    assert info.value.code == "bad_trailer" and user_state(user_repo) == before


def test_a_key_that_cannot_sign_is_a_clear_error_and_no_branch(user_repo: Path, tmp_path: Path) -> None:
    wc = _make_change(user_repo, tmp_path)
    with pytest.raises(RepoError) as info:
        accept(user_repo, wc.base_commit, wc.diff().text, "errand/11-x", "Fix add",
               signing=Signing(str(tmp_path / "no-such-key")))
    assert info.value.code == "signing_failed" and "no-such-key" in info.value.message
    assert git(user_repo, "branch", "--list", "errand/11-x").strip() == ""
