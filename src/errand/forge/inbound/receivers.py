"""A webhook delivery as each forge sends it: proved as that forge proves it, named by its
delivery id, and said in the events :class:`~errand.forge.inbound.webhooks.WebhookHandler` acts on
(GitHub's, errand's first forge: ``issues.labeled``, ``issue_comment.created``,
``pull_request_review.submitted``).

* GitHub: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>``, ``X-GitHub-Delivery``.
* Gitea / Forgejo: ``X-Gitea-Signature`` / ``X-Forgejo-Signature``: the hex HMAC-SHA256 of
  the raw body; ``X-Gitea-Delivery``; ``X-Gitea-Event`` (and ``-Event-Type``, the finer name).
* GitLab: ``X-Gitlab-Token``, the secret itself (compared in constant time; GitLab signs
  nothing), ``X-Gitlab-Event`` and ``X-Gitlab-Event-UUID``.

Nothing here reads the payload before the proof holds.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from errand.forge.errors import ForgeError
from errand.forge.inbound.webhooks import verify_signature

__all__ = ["Delivery", "GitHubReceiver", "GitLabReceiver", "GiteaReceiver", "Receiver", "receiver_for"]


@dataclass(frozen=True)
class Delivery:
    id: str  # unique per delivery, redelivered with the same id (at most 80 characters)
    event: str  # in the handler's (GitHub's) words
    payload: dict[str, Any]


class Receiver(Protocol):
    kind: str

    def verify(self, secret: str, headers: Mapping[str, str], body: bytes) -> None:
        """Raise ``bad_signature`` unless the delivery proves it knows ``secret``."""
        ...

    def read(self, headers: Mapping[str, str], body: bytes, payload: dict[str, Any]) -> Delivery:
        ...


def _bad(message: str) -> ForgeError:
    return ForgeError(message, code="bad_delivery")


class GitHubReceiver:
    kind = "github"

    def verify(self, secret: str, headers: Mapping[str, str], body: bytes) -> None:
        verify_signature(secret, body, headers.get("x-hub-signature-256"))

    def read(self, headers: Mapping[str, str], body: bytes, payload: dict[str, Any]) -> Delivery:
        delivery = headers.get("x-github-delivery", "").strip()
        event = headers.get("x-github-event", "").strip()
        if not delivery or not event:
            raise _bad("a delivery needs X-GitHub-Event and X-GitHub-Delivery")
        return Delivery(delivery[:80], event, payload)


class GiteaReceiver:
    """Gitea and Forgejo: Forgejo sends both header families; either proves the delivery."""

    kind = "gitea"

    def __init__(self, label: str) -> None:
        self.label = label

    def verify(self, secret: str, headers: Mapping[str, str], body: bytes) -> None:
        given = (headers.get("x-forgejo-signature") or headers.get("x-gitea-signature") or "").strip().lower()
        expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        if not given or not hmac.compare_digest(expected, given):
            raise ForgeError("the delivery's signature does not match the webhook secret", code="bad_signature")

    def read(self, headers: Mapping[str, str], body: bytes, payload: dict[str, Any]) -> Delivery:
        event = (headers.get("x-forgejo-event") or headers.get("x-gitea-event") or "").strip()
        kind = (headers.get("x-forgejo-event-type") or headers.get("x-gitea-event-type") or event).strip()
        delivery = (headers.get("x-forgejo-delivery") or headers.get("x-gitea-delivery") or "").strip()
        if not event or not delivery:
            raise _bad("a delivery needs X-Gitea-Event and X-Gitea-Delivery (or X-Forgejo-…)")
        said, said_payload = self._said(event, kind, payload)
        return Delivery(f"gitea:{delivery}"[:80], said, said_payload)

    def _said(self, event: str, kind: str, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        action = payload.get("action")
        if event == "issues" and (kind == "issue_label" or action in ("label_updated", "opened")):
            # Gitea says the labels changed, not which: the configured one counts when the issue has it,
            # as an addition only when the issue is new (``label_updated``: see errand.forge.inbound.decide).
            names = [str(label.get("name")) for label in (payload["issue"].get("labels") or [])]
            label = self.label if self.label in names else (names[0] if names else "")
            changed = "labeled" if action == "opened" else "label_updated"
            return "issues", {**payload, "action": changed, "label": {"name": label}}
        if event == "issue_comment":
            return event, payload
        reviewed = kind.startswith("pull_request_review_") and kind != "pull_request_review_request"
        if reviewed or event in ("pull_request_approved", "pull_request_rejected", "pull_request_comment"):
            review = payload.get("review") or {}
            return "pull_request_review", {**payload, "action": "submitted", "review": {
                "id": None, "body": review.get("content") or "", "user": payload.get("sender")}}
        return f"gitea:{kind}", payload


class GitLabReceiver:
    kind = "gitlab"

    def __init__(self, label: str) -> None:
        self.label = label

    def verify(self, secret: str, headers: Mapping[str, str], body: bytes) -> None:
        given = headers.get("x-gitlab-token") or ""
        if not given or not hmac.compare_digest(secret.encode(), given.encode()):
            raise ForgeError("the delivery's X-Gitlab-Token is not the webhook secret", code="bad_signature")

    def read(self, headers: Mapping[str, str], body: bytes, payload: dict[str, Any]) -> Delivery:
        event = headers.get("x-gitlab-event", "").strip()
        if not event:
            raise _bad("a delivery needs X-Gitlab-Event")
        # GitLab before 15.x sends no id: a redelivery is the same body, so its digest names it.
        delivery = headers.get("x-gitlab-event-uuid", "").strip() or hashlib.sha256(body).hexdigest()
        said, said_payload = self._said(event, payload)
        return Delivery(f"gitlab:{delivery}"[:80], said, said_payload)

    def _said(self, event: str, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        attributes = payload.get("object_attributes") or {}
        base = {"repository": {"full_name": str((payload.get("project") or {}).get("path_with_namespace") or "")},
                "sender": {"login": (payload.get("user") or {}).get("username")}}
        if event == "Issue Hook":
            added = _added_labels(payload)
            if self.label not in added:
                return "issues", {**base, "action": "edited"}
            return "issues", {**base, "action": "labeled", "label": {"name": self.label},
                              "issue": {"number": int(attributes["iid"])}}
        if event == "Note Hook" and attributes.get("noteable_type") in ("Issue", "MergeRequest"):
            on_merge_request = attributes.get("noteable_type") == "MergeRequest"
            target = payload["merge_request" if on_merge_request else "issue"]
            # GitLab sends a Note Hook for an edited note too: an edit is no new comment (GitHub's `edited`).
            action = "edited" if attributes.get("action") == "update" else "created"
            return "issue_comment", {**base, "action": action, "comment": {
                "id": attributes.get("id"), "body": attributes.get("note") or "", "user": base["sender"]},
                "issue": {"number": int(target["iid"]), "pull_request": {} if on_merge_request else None}}
        return f"gitlab:{event}", payload


def _added_labels(payload: dict[str, Any]) -> set[str]:
    """The labels this Issue Hook added: all of them for a new issue, else current − previous."""
    attributes = payload.get("object_attributes") or {}
    if attributes.get("action") == "open":
        return {str(label.get("title")) for label in payload.get("labels") or []}
    change = (payload.get("changes") or {}).get("labels") or {}
    titles = [{str(label.get("title")) for label in change.get(side) or []} for side in ("current", "previous")]
    return titles[0] - titles[1]


def receiver_for(kind: str, label: str) -> Receiver:
    if kind == "gitea":
        return GiteaReceiver(label)
    if kind == "gitlab":
        return GitLabReceiver(label)
    return GitHubReceiver()
