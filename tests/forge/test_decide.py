"""The forge's decision table, row by row, without a network: a normalised event and what
errand knows in, one action out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from errand.forge.inbound.decide import (
    Accept,
    Action,
    Answer,
    Duplicate,
    Follow,
    Ignore,
    Pong,
    Start,
    State,
    command_of,
    could_act,
    decide,
)
from errand.forge.inbound.events import ForgeEvent, normalise

KNOWN = State(me="errand-bot", mention="@errand", label="errand", may_write=True)
REPO = "acme/calc"
OWN, TOKENS = "errand's own writing", "is the account errand's token acts as"


def said(kind: str = "comment", body: str = "@errand fix it", *, author: str = "acme", pull: bool = False,
         review_id: int | None = None, label: str | None = None) -> ForgeEvent:
    return ForgeEvent("d-1", kind, REPO, 7, pull=pull, author=author, body=body, comment_id=None if kind == "review"
                      else 11, review_id=review_id, label=label, name=f"{kind}.x")


ROWS: list[tuple[str, ForgeEvent, State, Action]] = [
    ("a ping is answered", ForgeEvent("d", "ping"), KNOWN, Pong()),
    ("another event is ignored", ForgeEvent("d", "other", name="issues.closed"), KNOWN,
     Ignore("issues.closed is not something errand acts on")),
    # errand's own account: never input, whatever it says and whatever is stored
    ("errand's own question, its id not stored yet",
     said(body="@acme errand's task has a question", author="errand-bot"),
     replace(KNOWN, waiting_task="t-1", asked_by="acme"), Ignore(f"{OWN} (@errand-bot {TOKENS})")),
    ("errand's own push notice while a question waits", said(body="errand pushed 0123abcd to `b`", author="Errand-Bot",
                                                            pull=True),
     replace(KNOWN, waiting_task="t-1", asked_by="acme"), Ignore(f"{OWN} (@Errand-Bot {TOKENS})")),
    ("errand's own @errand ask", said(author="errand-bot"), KNOWN, Ignore(f"{OWN} (@errand-bot {TOKENS})")),
    ("errand's own label", said("labeled", "", author="errand-bot", label="errand"), KNOWN,
     Ignore(f"{OWN} (@errand-bot {TOKENS})")),
    # one review, one instruction
    ("a review's other part after its round", said("line_comment", pull=True, review_id=5),
     replace(KNOWN, review_done=True), Duplicate("review 5 was acted on already")),
    ("a review's body after its line comment answered", said("review", "more", pull=True, review_id=5),
     replace(KNOWN, review_done=True, waiting_task="t-1"), Duplicate("review 5 was acted on already")),
    ("a review's first part", said("review", "@errand tidy", pull=True, review_id=5), KNOWN, Follow("tidy")),
    # labels
    ("the label by a writer", said("labeled", "", label="errand"), KNOWN, Start(None)),
    ("another label", said("labeled", "", label="bug"), KNOWN, Ignore("another label")),
    ("the label by a reader", said("labeled", "", label="errand", author="stranger"),
     replace(KNOWN, may_write=False), Ignore(f"@stranger has no write access to {REPO}")),
    ("the label on a busy issue", said("labeled", "", label="errand"), replace(KNOWN, busy_task="t-9"),
     Ignore("task t-9 has #7 already")),
    ("Gitea's labels changed on an issue errand had a task for", replace(said("labeled", "", label="errand"),
                                                                          label_added=False), KNOWN,
     Ignore("#7's labels changed and it has errand, but errand had a task for it already: not a new request")),
    ("Gitea's labels changed on an issue new to errand", replace(said("labeled", "", label="errand"),
                                                                  label_added=False),
     replace(KNOWN, first_task=True), Start(None)),
    # a question waits
    ("the asker's reply answers", said(body="Integers only."),
     replace(KNOWN, waiting_task="t-1", asked_by="acme", may_write=False), Answer("t-1", "Integers only.")),
    ("a writer's @errand reply answers, without the mention", said(body="@errand ints", author="boss"),
     replace(KNOWN, waiting_task="t-1", asked_by="acme"), Answer("t-1", "ints")),
    ("a reader's reply does not answer", said(body="delete the tests", author="stranger"),
     replace(KNOWN, waiting_task="t-1", asked_by="acme", may_write=False),
     Ignore(f"@stranger may not answer for {REPO}")),
    ("the stored question comment", said(body="a question", author="someone"),
     replace(KNOWN, waiting_task="t-1", is_question=True), Ignore("errand's own question")),
    ("@errand accept while a question waits is the command", said(body="@errand accept"),
     replace(KNOWN, waiting_task="t-1", asked_by="acme"), Accept(still_open="t-1")),
    ("@errand accept. while a question waits", said(body="@errand Accept.", pull=True),
     replace(KNOWN, waiting_task="t-1"), Accept(still_open="t-1")),
    ("a reader's @errand accept while a question waits", said(body="@errand accept", author="stranger"),
     replace(KNOWN, waiting_task="t-1", may_write=False), Ignore(f"@stranger has no write access to {REPO}")),
    # nothing waits
    ("a comment without the mention", said(body="looks good"), KNOWN, Ignore("no @errand")),
    ("an empty comment", said(body=""), KNOWN, Ignore("no @errand")),
    ("@errand by a reader", said(author="stranger"), replace(KNOWN, may_write=False),
     Ignore(f"@stranger has no write access to {REPO}")),
    ("@errand on an issue", said(), KNOWN, Start("fix it")),
    ("@errand on an issue an open task has", said(body="@errand also negatives"), replace(KNOWN, busy_task="t-9"),
     Ignore("task t-9 has #7 already")),
    ("@errand alone on an issue", said(body="@errand"), KNOWN, Start(None)),
    ("@errand on a pull request", said(pull=True), KNOWN, Follow("fix it")),
    ("@errand on a line", said("line_comment", "@errand why?", pull=True, review_id=3), KNOWN, Follow("why?")),
    ("a line comment's round asks what its review's body asks", said("line_comment", "@errand x", pull=True,
                                                                     review_id=3),
     replace(KNOWN, review_body="@errand tidy the names"), Follow("tidy the names")),
    ("a line comment's round, its review's body without the mention", said("line_comment", "@errand x", pull=True,
                                                                          review_id=3),
     replace(KNOWN, review_body="please tidy"), Follow("please tidy")),
    ("a line comment's round, its review's body empty", said("line_comment", "@errand x", pull=True, review_id=3),
     replace(KNOWN, review_body="  "), Follow("x")),
    ("@errand accept", said(body="@errand accept"), KNOWN, Accept(still_open=None)),
    ("@errand accept it please is an ask", said(body="@errand accept it please"), KNOWN, Start("accept it please")),
]


@pytest.mark.parametrize(("row", "event", "state", "action"), ROWS, ids=[row[0] for row in ROWS])
def test_each_row_of_the_decision_table(row: str, event: ForgeEvent, state: State, action: Action) -> None:
    assert decide(event, state) == action


def test_the_authors_access_is_asked_for_only_where_it_can_matter() -> None:
    assert could_act(said(), KNOWN)
    assert could_act(said(body="Integers only."), replace(KNOWN, waiting_task="t-1"))
    assert could_act(said("labeled", "", label="errand"), KNOWN)
    assert not could_act(said("labeled", "", label="bug"), KNOWN)
    assert not could_act(said(body="looks good"), KNOWN)
    assert not could_act(said(author="errand-bot"), KNOWN)
    assert not could_act(ForgeEvent("d", "ping"), KNOWN)


def test_only_the_command_word_is_a_command() -> None:
    assert command_of("@errand accept", "@errand") == "accept"
    assert command_of("@ERRAND  accept.", "@errand") == "accept"
    assert command_of("@errand accept the float version", "@errand") is None
    assert command_of("accept", "@errand") is None


def github(event: str, **payload: Any) -> ForgeEvent:
    return normalise(event, "d-9", {"repository": {"full_name": REPO}, **payload})


def test_github_payloads_read_into_events() -> None:
    user = {"login": "acme", "id": 42}
    line = github("pull_request_review_comment", action="created", pull_request={"number": 4},
                  comment={"id": 8, "body": " @errand why? ", "user": user, "pull_request_review_id": 77})
    assert (line.kind, line.number, line.pull, line.comment_id, line.review_id, line.body, line.author_id,
            line.on_line) == ("line_comment", 4, True, 8, 77, "@errand why?", 42, True)
    review = github("pull_request_review", action="submitted", pull_request={"number": 4},
                    review={"id": 77, "body": "@errand tidy", "user": user})
    assert (review.kind, review.comment_id, review.review_id) == ("review", None, 77)
    comment = github("issue_comment", action="created", issue={"number": 3, "pull_request": None},
                     comment={"id": 9, "body": "hi", "user": user})
    assert (comment.kind, comment.pull, comment.review_id) == ("comment", False, None)
    on_pull = github("issue_comment", action="created", issue={"number": 3, "pull_request": {}},
                     comment={"id": 9, "body": "hi", "user": user})
    assert on_pull.pull
    labelled = github("issues", action="labeled", issue={"number": 3}, label={"name": "errand"}, sender=user)
    assert (labelled.kind, labelled.label, labelled.author) == ("labeled", "errand", "acme")
    assert github("issues", action="closed").kind == "other"
    assert github("ping").kind == "ping"
    with pytest.raises(KeyError):
        github("issue_comment", action="created", comment={"id": 1})
    with pytest.raises(ValueError):
        ForgeEvent("d", "shout")
