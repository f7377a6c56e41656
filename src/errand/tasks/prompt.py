"""The task message an agent starts from: the instruction, what the repository's
environment says about checking work, and what people said in earlier rounds."""

from __future__ import annotations

from errand.tasks.environment import Environment
from errand.tasks.records import Task, Verdict
from errand.tasks.store import TaskStore

__all__ = ["task_prompt"]


def task_prompt(store: TaskStore, task: Task, round_number: int, environment: Environment) -> str:
    parts = [task.instruction.strip()]
    checks = []
    if environment.test:
        checks.append(f"The project's test command is `{environment.test}`.")
    if environment.lint:
        checks.append(f"Its lint command is `{environment.lint}`.")
    if checks:
        parts.append(" ".join(checks) + " errand runs them on your result as evidence for the reviewer.")
    if round_number > 1:
        parts += _history(store, task)
    return "\n\n".join(parts)


def _history(store: TaskStore, task: Task) -> list[str]:
    """Follow-up instructions, rejection reasons and answered questions from earlier rounds."""
    lines: list[str] = []
    for review in store.reviews(task.id):
        if review.verdict is Verdict.FOLLOWUP and review.reason:
            lines.append(f"- The reviewer asked for a follow-up: {review.reason}")
        elif review.verdict is Verdict.REJECTED and review.reason:
            lines.append(f"- The reviewer rejected the work: {review.reason}")
    questions = store.events(task.id, kinds=["question", "answer_delivered"])
    for event in questions:
        text = str(event.data.get("text", ""))
        lines.append(f"- You asked: {text}" if event.kind == "question" else f"  The person answered: {text}")
    if not lines:
        return []
    return ["This task has been worked on before; your working copy already holds the work of the last "
            "finished round (if any). What happened since:\n" + "\n".join(lines)]
