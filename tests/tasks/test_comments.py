"""Anchoring line comments on a real git patch: which files and lines a comment may name, and
the lines it quotes, row by row (the faces' tests are tests/server/test_line_comments.py and
tests/forge/test_review_line_comments.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.harness import git, make_repo
from errand.errors import ConfigError
from errand.tasks.comments import MAX_QUOTED, LineComment, Quoted, anchor, quote_hunk
from errand.tasks.round.prompt import commented_instruction

LONG = "".join(f"line {n}\n" for n in range(1, 41))


@pytest.fixture
def changed(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A patch that edits two places of a 40-line file, adds, deletes, renames and adds a binary
    file; and the base's files."""
    repo = make_repo(tmp_path / "project", files={"long.txt": LONG, "gone.txt": "a\nb\n", "old_name.txt": "same\n"})
    base = {name: (repo / name).read_text() for name in ("long.txt", "gone.txt", "old_name.txt", "calc.py")}
    (repo / "long.txt").write_text(LONG.replace("line 3\n", "LINE 3\n").replace("line 30\n", "LINE 30\nextra\n"))
    (repo / "new.txt").write_text("one\ntwo\n")
    (repo / "gone.txt").unlink()
    git(repo, "mv", "old_name.txt", "new_name.txt")
    (repo / "blob.bin").write_bytes(b"\x00\x01\x02")
    git(repo, "add", "-A")
    return git(repo, "diff", "--cached", "--binary"), base


def one(changed: tuple[str, dict[str, str]], path: str, start: int, end: int, side: str = "new") -> LineComment:
    patch, base = changed
    [found] = anchor(patch, [LineComment.of(path, start, end, "why?", side)], base.get)
    return found


def test_lines_in_hunks_and_between_them_are_quoted_with_what_the_work_did(changed: tuple[str, dict[str, str]]) -> None:
    assert one(changed, "long.txt", 2, 4).quoted == (Quoted(2, " ", "line 2"), Quoted(3, "+", "LINE 3"),
                                                      Quoted(4, " ", "line 4"))
    assert one(changed, "long.txt", 3, 3, "old").quoted == (Quoted(3, "-", "line 3"),)
    # Between the hunks (no hunk shows line 15), and past the growth of the second hunk.
    assert one(changed, "long.txt", 15, 15).quoted == (Quoted(15, " ", "line 15"),)
    assert one(changed, "long.txt", 41, 41).quoted == (Quoted(41, " ", "line 40"),)
    assert one(changed, "new.txt", 1, 2).quoted == (Quoted(1, "+", "one"), Quoted(2, "+", "two"))
    assert one(changed, "gone.txt", 2, 2, "old").quoted == (Quoted(2, "-", "b"),)
    assert len(one(changed, "long.txt", 1, 41).quoted) == MAX_QUOTED


def test_a_renamed_file_is_named_by_its_new_path_or_its_old_one(changed: tuple[str, dict[str, str]]) -> None:
    assert one(changed, "new_name.txt", 1, 1).quoted == (Quoted(1, " ", "same"),)
    assert one(changed, "old_name.txt", 1, 1, "old").path == "old_name.txt"


@pytest.mark.parametrize(("path", "start", "end", "side", "says"), [
    ("calc.py", 1, 1, "new", "calc.py is not a file of the task's diff"),  # in the repository, not in the diff
    ("long.txt", 42, 42, "new", "long.txt has no line 42 on its new side (it has lines 1-41)"),
    ("long.txt", 40, 41, "old", "lines 40-41 of long.txt (old side): line 41 is not there (it has lines 1-40)"),
    ("new.txt", 1, 1, "old", "new.txt has no line 1 on its old side (that side of the file is empty)"),
    ("gone.txt", 1, 1, "new", "gone.txt has no line 1 on its new side"),
    ("blob.bin", 1, 1, "new", "blob.bin is a binary file"),
])
def test_a_comment_on_what_the_diff_does_not_have_is_refused(changed: tuple[str, dict[str, str]], path: str,
                                                             start: int, end: int, side: str, says: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(says)):
        one(changed, path, start, end, side)


def test_without_the_base_only_the_lines_the_hunks_show_can_be_named(changed: tuple[str, dict[str, str]]) -> None:
    patch, _base = changed
    says = "long.txt has no line 15 on its new side (it has lines 1-6, 27-34)"
    with pytest.raises(ConfigError, match=re.escape(says)):
        anchor(patch, [LineComment.of("long.txt", 15, 15, "why?")], lambda _path: None)


def test_a_forge_hunk_quotes_the_lines_it_shows_and_the_rendering_fences_backticks() -> None:
    hunk = "@@ -1,3 +1,3 @@\n def f():\n-    return '```'\n+    return '````'"
    quoted = quote_hunk(hunk, "new", 1, 2)
    assert quoted == (Quoted(1, " ", "def f():"), Quoted(2, "+", "    return '````'"))
    text = commented_instruction("", [LineComment("f.py", 1, 2, "no backticks", quoted=quoted, author="acme")])
    assert "   `````\n" in text and "@acme: no backticks" in text
    assert commented_instruction("just text", []) == "just text"


def test_a_range_of_a_billion_lines_is_refused_at_the_first_line_past_the_end(
        changed: tuple[str, dict[str, str]]) -> None:
    with pytest.raises(ConfigError, match=re.escape("line 42 is not there (it has lines 1-41)")):
        one(changed, "long.txt", 1, 1_000_000_000)


def test_paths_git_quotes_are_the_files_own_names(tmp_path: Path) -> None:
    """git prints a path with a byte it will not show as it is C-quoted ("t\\303\\251st.py"): the
    comment names the file as the person sees it, and the diff view shows that name (the red team's
    comment on tést.py was refused as an unknown path, and the page showed t\\303\\251st.py)."""
    from errand.server.diffview import parse

    names = ["tést.py", "tab\there.py", 'say "hi".py']
    repo = make_repo(tmp_path / "project", files={name: "one\ntwo\n" for name in names})
    base = {name: "one\ntwo\n" for name in names}
    for name in names:
        (repo / name).write_text("one\nTWO\n")
    git(repo, "add", "-A")
    patch = git(repo, "diff", "--cached")
    assert '"a/t\\303\\251st.py"' in patch  # quoted, as git prints it by default
    for name in names:
        [found] = anchor(patch, [LineComment.of(name, 2, 2, "why?", "new")], base.get)
        assert (found.path, found.quoted) == (name, (Quoted(2, "+", "TWO"),))
    assert sorted(f.path for f in parse(patch)) == sorted(names)
