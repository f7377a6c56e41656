"""The pull request's text: what was done, the evidence behind it, and what it fixes.

Everything in it comes from the task's record (the agent's summary, evidence errand
measured, the question and answer), shown as text: Markdown the agent wrote is
quoted, so a summary cannot forge an errand heading or a "Fixes" line of its own.
"""

from __future__ import annotations

from errand.tasks.evidence import Evidence, TestRun
from errand.tasks.records import Task

__all__ = ["pull_body", "pull_title"]


def pull_title(task: Task, summary: str | None) -> str:
    first = (summary or "").strip().splitlines()[0].strip() if (summary or "").strip() else task.title
    return first if len(first) <= 72 else first[:71].rstrip() + "…"


def pull_body(task: Task, evidence: Evidence | None, *, issue: int | None, qa: list[tuple[str, str]],
              review_url: str | None, requested_by: str | None, follows: int | None = None) -> str:
    parts = ["### Summary", _quoted((evidence.summary if evidence else None) or task.title)]
    if evidence is not None:
        parts += ["### Evidence", _evidence(evidence)]
        if evidence.assumptions:
            parts += ["### Assumptions", "\n".join(f"- {_inline(a)}" for a in evidence.assumptions)]
    if qa:
        parts += ["### Question and answer", "\n\n".join(f"**Q:** {_inline(q)}\n**A:** {_inline(a)}" for q, a in qa)]
    if follows is not None:
        parts.append(f"Follows up #{follows}: its branch is in a fork whose author has not allowed edits by "
                     "maintainers, so this carries its commits and errand's on top.")
    footer = [f"errand task `{task.id}` · agent {_code(task.agent or 'errand')}"
              + (f" · [review page]({review_url})" if review_url else "")]
    if requested_by:
        footer.append(f"asked by @{requested_by}")
    parts.append("---\n" + " · ".join(footer) + "\n\nA draft for review: errand merges nothing.")
    if issue is not None:
        parts.append(f"Fixes #{issue}")
    return "\n\n".join(parts) + "\n"


def _evidence(evidence: Evidence) -> str:
    lines = [f"- tests on base: {_run(evidence.tests_before)}", f"- tests after: {_run(evidence.tests_after)}"]
    if evidence.lint_after is not None:
        lines.append(f"- lint after: {_run(evidence.lint_after)}")
    for label, names in (("fixed (fail → pass)", evidence.fixed_tests),
                         ("broken (pass → fail)", evidence.broken_tests)):
        if names:
            more = f" and {len(names) - 10} more" if len(names) > 10 else ""
            lines.append(f"- {label}: " + ", ".join(f"`{_code(name)}`" for name in names[:10]) + more)
    checks = [failed for failed in evidence.failed_commands if "check" in failed]
    agents = [failed for failed in evidence.failed_commands if "check" not in failed]
    for failed in checks:
        lines.append(f"- the test command ({_inline(failed['check'])}) failed before reporting any test: "
                     f"`{_code(str(failed.get('cause') or 'it printed nothing'))}`")
    lines.append(f"- {len(evidence.files)} file(s) changed, +{evidence.additions} −{evidence.deletions}; "
                 f"{evidence.commands_run} command(s) run by the agent, {len(agents)} failed")
    for failed in agents[:10]:
        lines.append(f"  - `{_code(str(failed.get('command')))}` exited {failed.get('exit_code')}")
    lines.append(f"- confidence **{evidence.confidence.level}**: "
                 + "; ".join(_inline(r) for r in evidence.confidence.reasons))
    return "\n".join(lines)


def _run(run: TestRun | None) -> str:
    return "not run (no test command)" if run is None else f"`{_code(run.command)}` — {run.describe()}"


def _quoted(text: str) -> str:
    return "\n".join("> " + line for line in text.strip().splitlines())


def _inline(text: str) -> str:
    return " ".join(str(text).split()).replace("<", "&lt;")


def _code(text: str) -> str:
    return " ".join(text.split()).replace("`", "'")
