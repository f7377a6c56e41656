"""The diff review's view of a patch: files, line numbers, highlighting, whitespace."""

from __future__ import annotations

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
