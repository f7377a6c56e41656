"""The message an agent starts from: the instruction, the project's checks, and in a later round
what people said since (follow-ups, rejections, answered questions); and line comments rendered
with their file, lines and quotes."""

from __future__ import annotations

from errand.tasks.comments import LineComment, Quoted
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Task, Verdict
from errand.tasks.round.environment import Environment
from errand.tasks.round.prompt import commented_instruction, task_prompt
from errand.tasks.store.tasks import TaskStore


def reviewable(store: TaskStore) -> Task:
    return store.create_reviewable(title="Fix", instruction="  Fix the failing test.\n", repo="/srv/calc",
                                   base_ref="main", base_commit="a" * 40, worker="w", result={})


def test_the_first_round_is_the_instruction_and_the_checks_errand_runs(sqlite_store: TaskStore) -> None:
    task = reviewable(sqlite_store)
    assert task_prompt(sqlite_store, task, 1, Environment()) == "Fix the failing test."
    prompt = task_prompt(sqlite_store, task, 1, Environment(test="pytest -q", lint="ruff check"))
    assert prompt == ("Fix the failing test.\n\nThe project's test command is `pytest -q`. Its lint command is "
                      "`ruff check`. errand runs them on your result as evidence for the reviewer.")


def test_a_later_round_hears_what_people_said_in_order(sqlite_store: TaskStore) -> None:
    task = reviewable(sqlite_store)
    sqlite_store.add_review(task.id, Verdict.REJECTED, "It deletes the fixture")
    for state in (TaskState.QUEUED, TaskState.PREPARING, TaskState.RUNNING):
        sqlite_store.set_state(task.id, state)
    sqlite_store.append_event(task.id, None, "question", {"text": "Keep the old name?"})
    sqlite_store.append_event(task.id, None, "answer_delivered", {"text": "Yes"})
    sqlite_store.set_state(task.id, TaskState.READY_FOR_REVIEW)
    sqlite_store.add_review(task.id, Verdict.FOLLOWUP, "Also the docs.\n\n1. README.md, line 3:\n   say so")
    prompt = task_prompt(sqlite_store, task, 3, Environment())
    assert task_prompt(sqlite_store, task, 1, Environment()) == "Fix the failing test."  # the first round hears nothing
    head, history = prompt.split("\n\n", 1)
    assert head == "Fix the failing test."
    assert history.startswith("This task has been worked on before")
    assert history.endswith("- The reviewer rejected the work: It deletes the fixture\n"
                            "- The reviewer asked for a follow-up: Also the docs.\n\n  1. README.md, line 3:\n"
                            "     say so\n"
                            "- You asked: Keep the old name?\n  The person answered: Yes")


def test_a_later_round_with_nothing_said_is_the_instruction_alone(sqlite_store: TaskStore) -> None:
    assert task_prompt(sqlite_store, reviewable(sqlite_store), 2, Environment()) == "Fix the failing test."


def test_comments_are_anchored_and_numbered_after_the_instruction() -> None:
    quoted = (Quoted(3, "+", "return a - b"), Quoted(4, " ", "pass"))
    comments = [LineComment("calc.py", 3, 6, "Should add.\nSee the issue.", quoted=quoted, author="octo"),
                LineComment("old.py", 2, 2, "Why remove this?", side="old"),
                LineComment("README.md", 0, 0, "Out of date")]
    text = commented_instruction("  Tidy up.  ", comments)
    assert text.startswith("Tidy up.\n\nThe reviewer commented on lines of the diff (3 comments).")
    assert ("1. calc.py, lines 3-6 (new):\n   ```\n       3 + return a - b\n       4   pass\n"
            "         … 2 more lines\n   ```\n   @octo: Should add.\n   See the issue.") in text
    assert "2. old.py, line 2 (old):\n   Why remove this?" in text
    assert "3. README.md, the file as a whole:\n   Out of date" in text


def test_comments_on_another_attempt_than_the_one_continued_say_so() -> None:
    comment = [LineComment("calc.py", 1, 1, "x")]
    assert "(1 comment)" in commented_instruction("", comment)
    told = commented_instruction("", comment, attempt=2, continued=1)
    assert "lines of the diff of attempt 2" in told
    assert "Your working copy holds the work of attempt 1, the best-ranked, not of attempt 2" in told
    assert "Your working copy" not in commented_instruction("", comment, attempt=2, continued=2)
