"""What makes an accept worth a second look: the reasons a person is asked to confirm.

Accepting lands the agent's work on a branch. Three things in its evidence say a
person should look twice before that, and each is named so the person can judge
it: the tests fail after the change, errand's confidence in it is low, or it
deletes files (or empties them: their content is lost as surely). Every face
asks the same question from the same list — the CLI prompts (or refuses off a
terminal without ``--yes``), the HTTP API answers 409 unless the request says
``confirm``, the page shows a confirm step.
"""

from __future__ import annotations

import re

from errand.repo.git import diff_header_paths
from errand.tasks.evidence import Evidence

__all__ = ["accept_risks", "emptied"]

NAMED_FILES = 5


_FILE = re.compile(r"^diff --git ", re.MULTILINE)
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)
_EMPTY_BLOB = re.compile(r"^index [0-9a-f]+\.\.e69de29", re.MULTILINE)  # git's name for 0 bytes


def emptied(patch: str) -> list[str]:
    """The files ``patch`` leaves empty (0 bytes) without deleting them: the file's new blob is
    the empty one, or its last hunk says its new side has no line (``+0,0``, which git writes
    only for an empty file)."""
    found = []
    for chunk in _FILE.split(patch)[1:]:
        head, _, body = chunk.partition("\n@@")
        if "\nnew file mode" in head or "\ndeleted file mode" in head:
            continue
        hunks = _HUNK.findall("@@" + body) if body else []
        if _EMPTY_BLOB.search(head) or (hunks and hunks[-1] == ("0", "0")):
            first = head.split("\n", 1)[0]
            paths = diff_header_paths("diff --git " + first)
            found.append(paths[1] if paths else first)
    return found


def accept_risks(evidence: Evidence | None, patch: str = "") -> list[str]:
    """Why accepting the run with ``evidence`` (and ``patch``, its diff) needs a confirm; empty
    when nothing does."""
    if evidence is None:
        return ["no evidence was recorded for this attempt"]
    reasons = []
    after = evidence.tests_after
    if after is not None and not after.ok:
        reasons.append(f"its tests fail after the change: {after.describe()}")
    if evidence.confidence.level == "low":
        why = "; ".join(evidence.confidence.reasons)
        reasons.append("errand's confidence in it is low" + (f" ({why})" if why else ""))
    deleted = [str(f.get("path")) for f in evidence.files if f.get("status") == "deleted"]
    if deleted:
        reasons.append(f"it deletes {len(deleted)} file(s): {_named(deleted)}")
    if empty := [path for path in emptied(patch) if path not in deleted]:
        reasons.append(f"it empties {len(empty)} file(s), leaving 0 bytes (a deletion in all but name): "
                       f"{_named(empty)}")
    return reasons


def _named(paths: list[str]) -> str:
    return ", ".join(paths[:NAMED_FILES]) + (f" and {len(paths) - NAMED_FILES} more" if len(paths) > NAMED_FILES
                                             else "")
