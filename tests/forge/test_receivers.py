"""Each forge's delivery, proved as that forge proves it and said in the handler's events."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest

from errand.forge import ForgeError
from errand.forge.inbound.receivers import GiteaReceiver, GitLabReceiver

SECRET = "s3cret"
BODY = b'{"action": "created"}'


def hex_of(body: bytes, secret: str = SECRET) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@pytest.mark.parametrize("header", ["x-gitea-signature", "x-forgejo-signature"])
def test_gitea_and_forgejo_signatures_hold(header: str) -> None:
    GiteaReceiver("errand").verify(SECRET, {header: hex_of(BODY)}, BODY)


@pytest.mark.parametrize("headers", [
    {"x-gitea-signature": hex_of(BODY, "other")},
    {"x-gitea-signature": hex_of(BODY + b" ")},  # another body
    {"x-gitea-signature": ""},
    {"x-hub-signature-256": "sha256=" + hex_of(BODY)},  # GitHub's header proves nothing here
    {},
])
def test_a_forged_gitea_signature_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(ForgeError) as caught:
        GiteaReceiver("errand").verify(SECRET, headers, BODY)
    assert caught.value.code == "bad_signature"


def test_gitea_label_changes_count_only_with_the_label() -> None:
    receiver = GiteaReceiver("errand")
    headers = {"x-gitea-event": "issues", "x-gitea-event-type": "issue_label", "x-gitea-delivery": "d-1"}
    labelled = {"action": "label_updated", "issue": {"number": 3, "labels": [{"name": "bug"}, {"name": "errand"}]}}
    said = receiver.read(headers, b"", labelled)
    assert (said.id, said.event, said.payload["action"], said.payload["label"]) == (
        "gitea:d-1", "issues", "label_updated", {"name": "errand"})  # not said to be added now
    other = receiver.read(headers, b"", {**labelled, "issue": {"number": 3, "labels": [{"name": "bug"}]}})
    assert other.payload["label"] == {"name": "bug"}


def test_a_gitea_review_is_a_review_and_a_review_request_is_not() -> None:
    receiver = GiteaReceiver("errand")
    review = {"action": "reviewed", "pull_request": {"number": 2}, "sender": {"login": "acme"},
              "review": {"type": "pull_request_review_rejected", "content": "@errand tidy up"}}
    said = receiver.read({"x-gitea-event": "pull_request_rejected", "x-gitea-delivery": "d"}, b"", review)
    assert said.event == "pull_request_review" and said.payload["review"]["body"] == "@errand tidy up"
    asked = receiver.read({"x-gitea-event": "pull_request", "x-gitea-event-type": "pull_request_review_request",
                           "x-gitea-delivery": "d"}, b"", review)
    assert asked.event == "gitea:pull_request_review_request"


def test_the_gitlab_token_is_compared_whole() -> None:
    receiver = GitLabReceiver("errand")
    receiver.verify(SECRET, {"x-gitlab-token": SECRET}, BODY)
    for given in ("", SECRET[:-1], SECRET + "x", SECRET.upper()):
        with pytest.raises(ForgeError):
            receiver.verify(SECRET, {"x-gitlab-token": given}, BODY)


def issue_hook(action: str, previous: list[str], current: list[str]) -> dict[str, Any]:
    return {"object_kind": "issue", "user": {"username": "acme"}, "project": {"path_with_namespace": "a/b/c"},
            "object_attributes": {"iid": 4, "action": action}, "labels": [{"title": t} for t in current],
            "changes": {"labels": {"previous": [{"title": t} for t in previous],
                                   "current": [{"title": t} for t in current]}}}


@pytest.mark.parametrize(("hook", "starts"), [
    (issue_hook("update", [], ["errand"]), True),
    (issue_hook("update", ["errand"], ["errand", "bug"]), False),  # another label added to a labelled issue
    (issue_hook("open", [], ["errand"]), True),
    (issue_hook("update", ["bug"], []), False),
])
def test_a_gitlab_issue_hook_starts_work_only_when_the_label_was_added(hook: dict[str, Any], starts: bool) -> None:
    said = GitLabReceiver("errand").read({"x-gitlab-event": "Issue Hook", "x-gitlab-event-uuid": "u"}, b"", hook)
    assert (said.payload["action"] == "labeled") is starts
    assert said.payload["repository"] == {"full_name": "a/b/c"} and said.payload["sender"] == {"login": "acme"}


def test_a_gitlab_delivery_without_an_id_is_named_by_its_body() -> None:
    receiver = GitLabReceiver("errand")
    body = json.dumps(issue_hook("update", [], ["errand"])).encode()
    first = receiver.read({"x-gitlab-event": "Issue Hook"}, body, json.loads(body))
    again = receiver.read({"x-gitlab-event": "Issue Hook"}, body, json.loads(body))
    other = receiver.read({"x-gitlab-event": "Issue Hook"}, body + b" ", json.loads(body))
    assert first.id == again.id != other.id and len(first.id) <= 80


def test_a_gitlab_note_says_whether_it_is_on_a_merge_request() -> None:
    receiver = GitLabReceiver("errand")
    note = {"user": {"username": "acme"}, "project": {"path_with_namespace": "a/b"},
            "object_attributes": {"id": 9, "note": "@errand go", "noteable_type": "MergeRequest"},
            "merge_request": {"iid": 1}}
    said = receiver.read({"x-gitlab-event": "Note Hook", "x-gitlab-event-uuid": "u"}, b"", note)
    assert said.event == "issue_comment" and said.payload["issue"] == {"number": 1, "pull_request": {}}
    assert said.payload["comment"] == {"id": 9, "body": "@errand go", "user": {"login": "acme"}}
    on_issue = receiver.read({"x-gitlab-event": "Note Hook", "x-gitlab-event-uuid": "u"}, b"", {
        **note, "object_attributes": {**note["object_attributes"], "noteable_type": "Issue"}, "issue": {"iid": 1}})
    assert on_issue.payload["issue"] == {"number": 1, "pull_request": None}


def test_a_gitlab_note_on_a_commit_is_nothing_errand_acts_on() -> None:
    note = {"user": {"username": "acme"}, "project": {"path_with_namespace": "a/b"},
            "object_attributes": {"id": 9, "note": "@errand go", "noteable_type": "Commit"}, "commit": {"id": "abc"}}
    said = GitLabReceiver("errand").read({"x-gitlab-event": "Note Hook", "x-gitlab-event-uuid": "u"}, b"", note)
    assert said.event == "gitlab:Note Hook"
