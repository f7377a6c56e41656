"""The diff review's view of a patch: files, line numbers, highlighting, whitespace."""

from __future__ import annotations

import pytest

from errand.server import diffview

PATCH = """diff --git a/calc.py b/calc.py
index 1111111..2222222 100644
--- a/calc.py
+++ b/calc.py
@@ -1,4 +1,4 @@
 def add(a, b):
-    return a - b
+    return a + b
-x=1
+x = 1
diff --git a/old.txt b/new.txt
similarity index 90%
rename from old.txt
rename to new.txt
diff --git a/gone.md b/gone.md
deleted file mode 100644
--- a/gone.md
+++ /dev/null
@@ -1 +0,0 @@
-bye
\\ No newline at end of file
diff --git a/logo.png b/logo.png
new file mode 100644
Binary files /dev/null and b/logo.png differ
"""


def test_files_statuses_and_line_numbers() -> None:
    calc, renamed, gone, logo = diffview.parse(PATCH)
    assert (calc.path, calc.status, calc.additions, calc.deletions) == ("calc.py", "modified", 2, 2)
    assert [(line.kind, line.old, line.new) for line in calc.lines[1:4]] == [
        ("context", 1, 1), ("del", 2, None), ("add", None, 2)]
    assert (renamed.path, renamed.old_path, renamed.status) == ("new.txt", "old.txt", "renamed")
    assert (gone.path, gone.status, gone.deletions, gone.lines[-1].kind) == ("gone.md", "deleted", 1, "note")
    assert logo.binary and logo.status == "added"


def test_whitespace_only_changes_are_shown_as_unchanged() -> None:
    calc = diffview.hide_whitespace(diffview.parse(PATCH))[0]
    assert (calc.additions, calc.deletions) == (1, 1)  # `x=1` → `x = 1` is whitespace only
    assert calc.lines[-1].kind == "context" and calc.lines[-1].text == "x = 1"


def test_highlighting_escapes_and_marks_tokens() -> None:
    first = PATCH.split("diff --git a/old.txt")[0].replace("return a + b", "return '<script>'")
    [file] = diffview.highlight(diffview.parse(first))
    html = "".join(str(line.html) for line in file.lines)
    assert "<script>" not in html and "&lt;script&gt;" in html and 'class="hl-k"' in html


def test_agent_control_and_bidi_characters_are_shown_not_obeyed() -> None:
    from errand.server import diffview

    patch = ("diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n"
             "+x = 2  # \u202eevil\x1b[2J\n")
    [file] = diffview.parse(patch)
    added = [line.text for line in file.lines if line.kind == "add"]
    assert added and "\u202e" not in added[0] and "\x1b" not in added[0] and "<U+202E>" in added[0]


EDITS = """diff --git a/src/app.py b/src/app.py
--- a/src/app.py
+++ b/src/app.py
@@ -10,3 +10,3 @@ def main():
 def total(items):
-    return sum(item.price for item in items)
+    return sum(item.cost for item in items)
 # end
@@ -40,0 +41,2 @@ def later():
+def extra():
+    pass
diff --git a/package-lock.json b/package-lock.json
--- a/package-lock.json
+++ b/package-lock.json
@@ -1 +1 @@
-{"a": 1}
+{"a": 2}
diff --git a/static/app.js b/static/app.js
--- a/static/app.js
+++ b/static/app.js
@@ -1 +1 @@
-var a=1;
+""" + "var a=1;" * 200 + """
"""


def test_the_changed_words_are_marked_on_both_sides_and_nothing_else() -> None:
    app = diffview.highlight(diffview.parse(EDITS))[0]
    removed, added = (line for line in app.lines[:5] if line.kind in ("del", "add"))
    assert removed.text[removed.words[0][0]:removed.words[0][1]] == "price"
    assert added.text[added.words[0][0]:added.words[0][1]] == "cost"
    assert str(added.html).count('class="w"') == 1 and ">cost</span></span>" in str(added.html)
    assert "return" in str(added.html) and 'class="hl-k">return' in str(added.html)  # still highlighted
    context = [line for line in app.lines if line.kind == "context"]
    assert all('class="w"' not in str(line.html) for line in context)


def test_a_rewritten_line_is_not_marked_word_by_word() -> None:
    patch = ("diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-the quick brown fox\n"
             "+completely different words here\n")
    [file] = diffview.highlight(diffview.parse(patch))
    assert all(not line.words for line in file.lines)


def test_hunks_name_the_first_line_of_each_side_they_cover() -> None:
    app = diffview.parse(EDITS)[0]
    hunks = [(line.old, line.new) for line in app.lines if line.kind == "hunk"]
    assert hunks == [(10, 10), (41, 41)]  # "-40,0": after line 40, so the next old line is 41


def test_deleted_generated_and_large_files_are_closed_saying_why() -> None:
    app, lock, bundle = diffview.parse(EDITS)
    gone = diffview.parse(PATCH)[2]
    big = diffview.parse("diff --git a/d.csv b/d.csv\nnew file mode 100644\n--- /dev/null\n+++ b/d.csv\n"
                         f"@@ -0,0 +1,{diffview.LARGE + 1} @@\n" + "+x\n" * (diffview.LARGE + 1))[0]
    small = diffview.parse("diff --git a/d.csv b/d.csv\nnew file mode 100644\n--- /dev/null\n+++ b/d.csv\n"
                           f"@@ -0,0 +1,{diffview.LARGE} @@\n" + "+x\n" * diffview.LARGE)[0]
    assert [f.collapsed for f in (app, lock, bundle, gone, big, small)] == [
        None, "generated: lockfile", "generated: minified", "deleted", f"large: {diffview.LARGE + 1} changed lines",
        None]
    assert app.expandable and not big.expandable  # an added file has no base to show more of


def test_viewed_marks_hold_while_the_change_does() -> None:
    first = diffview.parse(EDITS)[0]
    again = diffview.parse(EDITS)[0]
    changed = diffview.parse(EDITS.replace("item.cost", "item.costs"))[0]
    assert first.digest == again.digest != changed.digest


def test_the_tree_names_each_directory_once_in_the_diff_order() -> None:
    def file(path: str) -> diffview.FileDiff:
        return diffview.FileDiff(path, None, "modified", False, ())

    entries = diffview.tree([file(p) for p in ("README.md", "src/a/b.py", "src/a/c.py", "src/d.py", "tests/t.py")])
    assert [(e.name, e.depth, e.index) for e in entries] == [
        ("README.md", 0, 1), ("src/", 0, 0), ("a/", 1, 0), ("b.py", 2, 2), ("c.py", 2, 3), ("d.py", 1, 4),
        ("tests/", 0, 0), ("t.py", 1, 5)]


def test_base_lines_are_numbered_highlighted_and_bounded() -> None:
    total, lines = diffview.base_lines("a.py", "x = 1\ny = '<b>'\nz = 3\n", 2, 10)
    assert total == 3 and [line.old for line in lines] == [2, 3]
    assert "&lt;b&gt;" in str(lines[0].html) and "<b>" not in str(lines[0].html)


def test_a_deleted_file_has_nothing_more_to_show_but_its_base_can_be_read() -> None:
    gone = diffview.parse(PATCH)[2]
    assert gone.status == "deleted" and gone.has_base and not gone.expandable
    assert diffview.parse(PATCH)[0].expandable


def test_a_page_lists_and_draws_within_its_budgets() -> None:
    def added(name: str, lines: int) -> str:
        body = "".join(f"+{name} {n}\n" for n in range(lines))
        head = f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n"
        return f"{head}@@ -0,0 +1,{lines} @@\n{body}"

    patch = added("a.txt", 100_000) + "".join(added(f"m{n}.txt", 300) for n in range(20)) + "".join(
        added(f"s{n:04}.txt", 1) for n in range(diffview.PAGE_FILES))
    files = diffview.parse(patch)
    shown = diffview.budget(files)
    assert (shown.first, shown.last, shown.total) == (1, diffview.PAGE_FILES, len(files))
    assert 1 not in shown.drawn  # large: closed, never drawn inline
    drawn_lines = sum(len(shown.files[n - 1].lines) for n in shown.drawn)
    assert drawn_lines <= diffview.PAGE_LINES and shown.deferred_by_budget > 0
    assert all(shown.files[n - 1].lines[0].html is not None for n in shown.drawn)  # drawn ones are highlighted
    assert all(shown.files[n - 1].lines[0].html is None for n in range(1, shown.last + 1) if n not in shown.drawn)
    second = diffview.budget(files, diffview.PAGE_FILES + 1)
    assert (second.first, second.last) == (diffview.PAGE_FILES + 1, len(files))
    opened, left_out = diffview.one_file(files[0])
    assert len(opened.lines) == diffview.FILE_LINES and left_out == 100_001 - diffview.FILE_LINES


def test_lines_that_share_too_few_words_are_not_given_to_the_matcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the red team: 2,000 pairs of 490-character lines with no word in common (a
    `sed s/a/b/g` over numbered words) took the page 203 s, each pair's matcher 0.16 s for nothing;
    a count of shared words, in any order, rules them out first."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the matcher ran for lines that cannot be alike")

    removed = " ".join(f"a{i}" for i in range(160))[:490]
    monkeypatch.setattr(diffview.difflib, "SequenceMatcher", refuse)
    assert diffview._word_spans(removed, removed.replace("a", "b")) is None
    monkeypatch.undo()
    assert diffview._word_spans("x = f(alpha, beta)", "x = f(alpha, delta)") == (((13, 17),), ((13, 18),))
