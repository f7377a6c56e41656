"""The task message an agent starts from: the instruction, what the repository's
environment says about checking work, and what people said in earlier rounds."""

from __future__ import annotations

import re
from collections.abc import Sequence

from errand.tasks.comments import LineComment
from errand.tasks.events import text_of
from errand.tasks.records import Task, Verdict
from errand.tasks.round.environment import Environment
from errand.tasks.store.tasks import TaskStore

__all__ = ["commented_instruction", "task_prompt"]


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
            lines.append(_item(f"- The reviewer asked for a follow-up: {review.reason}"))
        elif review.verdict is Verdict.REJECTED and review.reason:
            lines.append(_item(f"- The reviewer rejected the work: {review.reason}"))
    questions = store.events(task.id, kinds=["question", "answer_delivered"])
    for event in questions:
        text = text_of(event)
        lines.append(f"- You asked: {text}" if event.kind == "question" else f"  The person answered: {text}")
    if not lines:
        return []
    return ["This task has been worked on before; your working copy already holds the work of the last "
            "finished round (if any). What happened since:\n" + "\n".join(lines)]


def _item(text: str) -> str:
    """A list item whose later lines (a follow-up's comments and quotes) stay inside it."""
    return "\n".join(line if index == 0 or not line else f"  {line}"
                     for index, line in enumerate(text.strip().split("\n")))


def commented_instruction(text: str, comments: Sequence[LineComment], *, attempt: int | None = None,
                          continued: int | None = None) -> str:
    """``text`` (an overall instruction, maybe empty) and each comment anchored: its file, its
    lines and side, the lines themselves as quoted, who said it, and what it says. The one
    rendering of line comments: the review page, ``errand followup --comment`` and a forge's
    review all send their comments through it.

    ``attempt`` names the attempt whose diff the comments are on, where a round had several;
    ``continued``, the attempt whose work the next round starts from: when they differ the
    agent is told that the quoted lines are not those of its working copy."""
    if not comments:
        return text.strip()
    of = "the diff" if attempt is None else f"the diff of attempt {attempt}"
    head = (f"The reviewer commented on lines of {of} ({len(comments)} "
            f"comment{'' if len(comments) == 1 else 's'}). Each names a file and its lines — \"new\": "
            f"numbered as the file is after {'the work so far' if attempt is None else f'attempt {attempt}'}, "
            "\"old\": as it was at the base — quotes them (+ added, - removed by the work), then says what "
            "to change:")
    if continued is not None and attempt is not None and continued != attempt:
        head += (f"\n(Your working copy holds the work of attempt {continued}, the best-ranked, not of attempt "
                 f"{attempt}: the quoted lines are attempt {attempt}'s; apply what the comments ask to your copy.)")
    parts = [text.strip()] if text.strip() else []
    parts.append(head)
    parts += [_comment(number, comment) for number, comment in enumerate(comments, start=1)]
    return "\n\n".join(parts)


def _comment(number: int, comment: LineComment) -> str:
    lines = "line" if comment.start_line == comment.end_line else "lines"
    where = f"{lines} {comment.lines} ({comment.side})" if comment.end_line else "the file as a whole"
    out = [f"{number}. {comment.path}, {where}:"]
    if comment.quoted:
        quoted = [f"{q.number:>5} {q.mark if q.mark in '+-' else ' '} {q.text}" for q in comment.quoted]
        more = comment.end_line - comment.start_line + 1 - len(comment.quoted)
        if more > 0:
            quoted.append(f"      … {more} more line{'' if more == 1 else 's'}")
        fence = "`" * max(3, 1 + max((len(run) for q in quoted for run in re.findall(r"`+", q)), default=0))
        out += [f"   {fence}", *(f"   {line}" for line in quoted), f"   {fence}"]
    said = comment.body.strip().split("\n")
    who = f"@{comment.author}: " if comment.author else ""
    out += [f"   {who}{said[0]}", *(f"   {line}" for line in said[1:])]
    return "\n".join(out)
