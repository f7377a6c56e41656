"""The HTTP API's request and response bodies, as they appear in its OpenAPI schema."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field

from errand.tasks.comments import MAX_COMMENTS, LineComment, Side
from errand.tasks.records import Review, Run, Task
from errand.tasks.service import MAX_ATTEMPTS

__all__ = ["AcceptIn", "AttemptOut", "CommentIn", "FollowupIn", "PostedOut", "ReasonIn", "TaskDetail", "TaskIn",
           "TaskPage", "Text", "TextIn", "without_patch"]


def _plain_text(value: str) -> str:
    """Text errand can store and hand to git: valid UTF-8, no NUL."""
    value.encode("utf-8")  # lone surrogates raise here, as a 422, not later as a 500
    if "\x00" in value:
        raise ValueError("text may not contain NUL characters")
    return value


Text = Annotated[str, AfterValidator(_plain_text)]
ShortText = Annotated[str, Field(max_length=4096), AfterValidator(_plain_text)]


class TaskIn(BaseModel):
    instruction: Text = Field(description="What the agent should do.")
    repo: ShortText = Field(description="A git repository on the server's machine, or a git URL.")
    base: ShortText = Field("HEAD", description="The ref the work starts from.")
    model: ShortText | None = Field(None, description="A [models.NAME] from the server's config.toml, or "
                                    "provider:model; the server's ERRAND_MODEL if omitted. The task records the "
                                    "endpoint it resolves to on the server (model_endpoint).")
    attempts: int = Field(1, ge=1, le=MAX_ATTEMPTS, description="Attempts run in parallel, ranked by evidence.")
    title: ShortText | None = None
    agent: ShortText | None = Field(default=None, description="The agent: errand (its own loop) or an agent "
                                    "CLI such as claude-code; the repository's errand.toml, then the server's "
                                    "config.toml, if omitted.")


class TextIn(BaseModel):
    text: Text


class CommentIn(BaseModel):
    """A comment on lines of the task's diff."""

    path: ShortText = Field(description="A file of the task's diff (its new path, or its old one for side old).")
    side: Side = Field("new", description="new: lines as the work left the file; old: as it was at the base.")
    start_line: int = Field(ge=1, description="The first line commented on (numbered on that side).")
    end_line: int | None = Field(None, ge=1, description="The last line; start_line if omitted.")
    body: Text = Field(description="What the comment says.")

    def comment(self) -> LineComment:
        end = self.start_line if self.end_line is None else self.end_line
        return LineComment.of(self.path, self.start_line, end, self.body, self.side)


class FollowupIn(BaseModel):
    text: Text = Field("", description="The overall instruction; may be empty when comments are given.")
    comments: list[CommentIn] = Field([], max_length=MAX_COMMENTS,
                                      description="Comments on lines of the diff, each anchored (its file, lines "
                                      "and the lines quoted) in the next round's instruction.")
    attempt: int | None = Field(None, ge=1, le=10_000, strict=True,  # true is no attempt number
                                description="The attempt (of the last round) whose diff the comments are on; the "
                                "best-ranked if omitted.")


class ReasonIn(BaseModel):
    reason: Text


class AcceptIn(BaseModel):
    attempt: int | None = Field(None, ge=1, description="Accept this attempt rather than the best-ranked one.")
    into: ShortText | None = Field(None, description="The local clone to commit in (for a task made from a URL).")
    confirm: bool = Field(False, description="Accept even a diff whose tests fail after it, at low confidence, or "
                                             "that deletes files; without it such a diff is refused with 409 "
                                             "`needs_confirmation`, its `reasons` listed.")


class TaskPage(BaseModel):
    tasks: list[Task]
    next: str | None = Field(description="Pass as `before` for the next (older) page; null on the last page.")


@dataclass(frozen=True)
class TaskDetail(Task):
    runs: list[Run]
    reviews: list[Review]
    question: str | None  # what the agent asked, while the task needs input
    # Elapsed time, steps, tokens and cost, per attempt against its budgets (errand.tasks.progress)
    progress: dict[str, Any] | None = None


def without_patch(run: Run) -> Run:
    """The run as the API shows it: the patch has an endpoint of its own (/diff)."""
    if not isinstance(run.result, dict):
        return run
    return replace(run, result={k: v for k, v in run.result.items() if k != "patch"})


class AttemptOut(BaseModel):
    run: Run
    rank: int
    evidence: dict[str, Any] | None


class PostedOut(BaseModel):
    event_id: int = Field(description="The id of the event that carries it to the task (see /events).")
