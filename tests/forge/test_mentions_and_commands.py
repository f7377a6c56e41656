"""Red team for issue 25: rows of the forge's decision table that decide wrongly (each FAILS on main).

Pure `decide` over a normalised event, no network."""

from __future__ import annotations

from dataclasses import replace

import pytest

from errand.forge.inbound.decide import Accept, Answer, Ignore, Start, State, decide
from errand.forge.inbound.events import ForgeEvent

KNOWN = State(me="errand-bot", mention="@errand", label="errand", may_write=True)
WAITING = replace(KNOWN, waiting_task="t-1", asked_by="acme")


def said(body: str, *, author: str = "acme", pull: bool = False) -> ForgeEvent:
    return ForgeEvent("d-1", "comment", "acme/calc", 7, pull=pull, author=author, body=body, comment_id=11,
                      name="issue_comment.created")


@pytest.mark.parametrize("body", ["@errands-team please look at this", "@errand-helper can you triage?",
                                  "@errandboy fix it"])
def test_a_mention_of_another_account_whose_login_begins_with_errand_starts_nothing(body: str) -> None:
    # `_mentions` is `body.lower().startswith("@errand")`: a writer pinging @errands-team starts a task.
    action = decide(said(body), KNOWN)
    assert not isinstance(action, Start), action


@pytest.mark.parametrize("body", [
    "> errand's task has a question: which rounding?\n\n@errand accept",  # GitHub's "Quote reply", then the command
    "@errand accept!",
    "@errand  accept, thanks",
])
def test_accept_typed_while_a_question_waits_is_a_command_not_the_answer(body: str) -> None:
    action = decide(said(body), WAITING)
    assert not isinstance(action, Answer), action
    assert isinstance(action, (Accept, Ignore)), action


def test_an_edited_gitlab_note_is_not_a_new_comment() -> None:
    # GitLab sends a Note Hook when a comment is edited too (object_attributes.action "update", a new
    # X-Gitlab-Event-UUID). The receiver maps every note to issue_comment "created": fixing a typo in an
    # old `@errand fix this` starts another task, and any edit while a question waits becomes the answer.
    from errand.forge.inbound.events import normalise
    from errand.forge.inbound.receivers import GitLabReceiver

    payload = {"object_kind": "note", "event_type": "note", "user": {"username": "acme"},
               "project": {"path_with_namespace": "acme/calc"},
               "object_attributes": {"id": 5, "note": "@errand fix this please", "noteable_type": "Issue",
                                     "action": "update"},
               "issue": {"iid": 7}}
    delivery = GitLabReceiver("errand").read({"x-gitlab-event": "Note Hook", "x-gitlab-event-uuid": "u-2"}, b"{}",
                                             payload)
    event = normalise(delivery.event, delivery.id, delivery.payload)
    assert event.kind != "comment", event
    assert not isinstance(decide(event, KNOWN), Start)


def test_another_label_on_a_gitea_issue_that_has_errands_label_starts_nothing() -> None:
    # Gitea says only "labels changed" (issue_label / label_updated). The receiver reads it as
    # "labeled errand" whenever the issue still carries errand's label: once errand's task on the
    # issue has ended, a writer adding `bug` to it starts a new task no one asked for.
    from errand.forge.inbound.events import normalise
    from errand.forge.inbound.receivers import GiteaReceiver

    payload = {"action": "label_updated", "sender": {"login": "acme"}, "repository": {"full_name": "acme/calc"},
               "issue": {"number": 7, "labels": [{"name": "errand"}, {"name": "bug"}]}}
    delivery = GiteaReceiver("errand").read({"x-gitea-event": "issues", "x-gitea-event-type": "issue_label",
                                             "x-gitea-delivery": "g-2"}, b"{}", payload)
    event = normalise(delivery.event, delivery.id, delivery.payload)
    assert not isinstance(decide(event, KNOWN), Start), event
