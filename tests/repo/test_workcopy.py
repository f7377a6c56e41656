from __future__ import annotations

import json
from pathlib import Path

import pytest
from repohelpers import BINARY, git, tree_hashes

from errand.errors import ConfigError
from errand.repo.workcopy import WorkingCopy, resolve_base


def _full_state(repo: Path) -> dict[str, str]:
    return tree_hashes(repo)  # every byte, .git included


def test_prepare_from_path_checks_out_base_and_leaves_user_repo_alone(user_repo: Path, tmp_path: Path) -> None:
    before = _full_state(user_repo)
    head = git(user_repo, "rev-parse", "HEAD").strip()
    wc = WorkingCopy.prepare(user_repo, dest=tmp_path / "wc")
    assert wc.base_commit == head
    assert git(wc.path, "rev-parse", "HEAD").strip() == head
    # The committed state, not the user's uncommitted work.
    assert (wc.path / "src/app.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert not (wc.path / "staged.txt").exists() and not (wc.path / "scratch.txt").exists()
    assert (wc.path / "logo.bin").read_bytes() == BINARY
    assert (wc.path / ".git").is_dir()
    assert git(wc.path, "remote").strip() == ""
    assert git(wc.path, "status", "--porcelain").strip() == ""
    assert _full_state(user_repo) == before
    # Its own objects: not hard-linked to the host copy, no alternates.
    assert not (wc.path / ".git/objects/info/alternates").exists()
    assert wc.host_git.is_dir() and not str(wc.host_git).startswith(str(wc.path) + "/")


def test_prepare_resolves_tags_and_relative_refs(user_repo: Path, tmp_path: Path) -> None:
    wc = WorkingCopy.prepare(user_repo, "HEAD~1", dest=tmp_path / "wc")
    assert wc.base_commit == git(user_repo, "rev-parse", "v1").strip()
    assert (wc.path / "README.md").read_text() == "# demo\n"


def test_prepare_from_file_url(user_repo: Path, tmp_path: Path) -> None:
    before = _full_state(user_repo)
    wc = WorkingCopy.prepare(f"file://{user_repo}", "v1", dest=tmp_path / "wc")
    assert wc.base_commit == git(user_repo, "rev-parse", "v1^{commit}").strip()
    assert (wc.path / "README.md").read_text() == "# demo\n"
    assert git(wc.path, "rev-parse", "HEAD").strip() == wc.base_commit
    assert _full_state(user_repo) == before


@pytest.mark.parametrize("source_kind", ["path", "url"])
def test_unknown_ref_creates_nothing(user_repo: Path, tmp_path: Path, source_kind: str) -> None:
    source = str(user_repo) if source_kind == "path" else f"file://{user_repo}"
    before = _full_state(user_repo)
    with pytest.raises(ConfigError) as info:
        WorkingCopy.prepare(source, "no-such-branch", dest=tmp_path / "wc")
    assert info.value.code == "unknown_ref"
    assert "no-such-branch" in info.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["user"]
    assert _full_state(user_repo) == before


def test_not_a_git_repo_creates_nothing(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "file.txt").write_text("x")
    for source in (plain, tmp_path / "missing"):
        with pytest.raises(ConfigError) as info:
            WorkingCopy.prepare(source, dest=tmp_path / "wc")
        assert info.value.code == "not_a_git_repo"
        assert str(source) in info.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]


@pytest.mark.parametrize("url", ["ftp://example.com/repo.git", "ext::sh -c touch% /tmp/x"])
def test_bad_url_is_rejected(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigError) as info:
        WorkingCopy.prepare(url, dest=tmp_path / "wc")
    assert info.value.code in {"bad_url", "not_a_git_repo"}
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ref", ["--upload-pack=touch x", "", "a b"])
def test_option_like_or_malformed_ref_is_rejected(user_repo: Path, tmp_path: Path, ref: str) -> None:
    with pytest.raises(ConfigError) as info:
        WorkingCopy.prepare(user_repo, ref, dest=tmp_path / "wc")
    assert info.value.code == "unknown_ref"


def test_existing_dest_is_rejected(user_repo: Path, tmp_path: Path) -> None:
    dest = tmp_path / "wc"
    dest.mkdir()
    (dest / "keep").write_text("mine")
    with pytest.raises(ConfigError) as info:
        WorkingCopy.prepare(user_repo, dest=dest)
    assert info.value.code == "dest_exists"
    assert [p.name for p in dest.iterdir()] == ["keep"]


def test_resolve_base_names_the_commit_without_cloning(user_repo: Path) -> None:
    head = git(user_repo, "rev-parse", "HEAD").strip()
    tag = git(user_repo, "rev-parse", "v1^{commit}").strip()
    assert resolve_base(user_repo, "HEAD") == head
    assert resolve_base(str(user_repo), "v1") == tag
    assert resolve_base(f"file://{user_repo}", "main") == head
    assert resolve_base(f"file://{user_repo}", "v1") in (tag, git(user_repo, "rev-parse", "v1").strip())
    with pytest.raises(ConfigError) as error:
        resolve_base(f"file://{user_repo}", "no-such-branch")
    assert error.value.code == "unknown_ref"
    with pytest.raises(ConfigError) as error:
        resolve_base(user_repo, "no-such-ref")
    assert error.value.code == "unknown_ref"
    with pytest.raises(ConfigError) as error:
        resolve_base(user_repo.parent / "nowhere", "HEAD")
    assert error.value.code == "not_a_git_repo"


def test_owner_gets_the_checkout_and_apply_replays_a_diff(user_repo: Path, tmp_path: Path) -> None:
    first = WorkingCopy.prepare(user_repo, "HEAD", dest=tmp_path / "a", owner=4242)
    assert {p.stat().st_uid for p in first.path.rglob("*")} == {4242}
    (first.path / "src/app.py").write_text("def add(a, b):\n    return a + b\n")
    (first.path / "new.txt").write_text("new\n")
    patch = first.diff().text

    second = WorkingCopy.prepare(user_repo, "HEAD", dest=tmp_path / "b", owner=4242)
    second.apply(patch)
    assert (second.path / "new.txt").read_text() == "new\n"
    assert (second.path / "new.txt").stat().st_uid == 4242
    assert second.diff().text == patch
    from errand.repo.errors import RepoError

    with pytest.raises(RepoError):
        second.apply(patch)  # already applied: it no longer applies, and says so


def test_a_working_copy_crosses_a_process_boundary_as_json(user_repo: Path, tmp_path: Path) -> None:
    """What a worker writes for a working copy it made reads back as the same copy, still usable."""
    wc = WorkingCopy.prepare(user_repo, dest=tmp_path / "wc")
    saved = json.loads(json.dumps(wc.to_json()))
    assert saved["path"] == str(wc.path) and saved["host_git"] == str(wc.host_git)
    reopened = WorkingCopy.from_json(saved)
    assert reopened == wc
    (reopened.path / "src/app.py").write_text("def add(a, b):\n    return a + b\n")
    assert "+    return a + b" in reopened.diff().text

    overlay = WorkingCopy(source="https://example.invalid/r.git", path=tmp_path / "o", base_ref="main",
                          base_commit="a" * 40, host_git=tmp_path / "h.git", index_seed=None, overlay=True,
                          diff_excludes=(".venv", "node_modules"))
    written = overlay.to_json()
    assert written == {  # the form workers have written into a round's state since before it moved here
        "source": "https://example.invalid/r.git", "path": str(tmp_path / "o"), "base_ref": "main",
        "base_commit": "a" * 40, "host_git": str(tmp_path / "h.git"), "index_seed": None, "overlay": True,
        "diff_excludes": [".venv", "node_modules"]}
    assert WorkingCopy.from_json(json.loads(json.dumps(written))) == overlay
