"""What makes an accept worth a second look: the reasons a person is asked to confirm.

Accepting lands the agent's work on a branch. Three things in its evidence say a
person should look twice before that, and each is named so the person can judge
it: the tests fail after the change, errand's confidence in it is low, or it
deletes files. Every face asks the same question from the same list — the CLI
prompts (or refuses off a terminal without ``--yes``), the HTTP API answers 409
unless the request says ``confirm``, the page shows a confirm step.
"""

from __future__ import annotations

from errand.tasks.evidence import Evidence

__all__ = ["accept_risks"]

NAMED_FILES = 5


def accept_risks(evidence: Evidence | None) -> list[str]:
    """Why accepting the run with ``evidence`` needs a confirm; empty when nothing does."""
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
        named = ", ".join(deleted[:NAMED_FILES]) + (f" and {len(deleted) - NAMED_FILES} more"
                                                    if len(deleted) > NAMED_FILES else "")
        reasons.append(f"it deletes {len(deleted)} file(s): {named}")
    return reasons
