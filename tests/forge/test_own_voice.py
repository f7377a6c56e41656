"""On every forge errand speaks, its own account's writing is never input, and a command typed
while a question waits is a command. Each delivery goes through that forge's receiver and
the real handler, whose every read goes to the loopback forge's API; the question's comment
id is not stored yet, as when the webhook beats the call that posted it."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from engine.cli import script
from errand.forge.hosts.kinds import open_forge
from errand.forge.inbound.receivers import receiver_for
from errand.forge.inbound.webhooks import Outcome, WebhookHandler
from errand.forge.links import Link, LinkStore
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

from .conftest import OnForge

pytestmark = pytest.mark.faults
ME = "errand-bot"


@dataclass
class Waiting:
    on: OnForge
    kind: str
    number: int
    task_id: str
    handler: WebhookHandler
    store: TaskStore

    def say(self, body: str, *, user: str) -> Outcome:
        """``body`` written on the issue by ``user``, and its webhook delivered as the forge sends it."""
        fake, repo = self.on.fake, self.on.repo
        if self.kind == "gitlab":
            note = fake.add_note(repo, "issues", self.number, body, user=user)
            event, payload = "Note Hook", fake.note_hook(repo, "issues", self.number, note)
            headers = {"x-gitlab-event": event, "x-gitlab-event-uuid": str(uuid.uuid4())}
        else:
            comment = fake.add_comment(repo, self.number, body, user=user)
            event, payload = "issue_comment", fake.comment_payload(repo, self.number, comment)
            headers = {"x-gitea-event": event, "x-gitea-delivery": str(uuid.uuid4())}
        raw = json.dumps(payload).encode()
        delivery = receiver_for(self.kind, "errand").read(headers, raw, json.loads(raw))
        return self.handler.handle(delivery.event, delivery.id, delivery.payload)

    def answers(self) -> list[Any]:
        return [e.data["text"] for e in self.store.events(self.task_id, kinds=["answer_sent"])]

    def comments(self) -> list[tuple[str, str]]:
        fake, repo = self.on.fake, self.on.repo
        if self.kind == "gitlab":
            return [(n["author"]["username"], n["body"]) for n in fake.projects[repo].notes("issues", self.number)]
        return [(c["user"]["login"], c["body"]) for c in fake.repos[repo].comments[self.number]]


@pytest.fixture(params=["gitea", "gitlab"])
def waiting(request: pytest.FixtureRequest) -> Any:
    kind = request.param
    on: OnForge = request.getfixturevalue(kind)
    owner = on.repo.split("/")[0]
    issue = on.fake.add_issue(on.repo, "add() subtracts", "add(2, 3) gives -1", user=owner)
    number = int(issue.get("iid") or issue["number"])
    forge, settings, token = open_forge(kind)
    with TaskStore.open() as store:
        service = TaskService(store, memory=None)
        task = service.submit("fix add()", repo=on.project, model=script(on.home / "none.json", []))
        for target in ("preparing", "running", "needs_input"):
            store.set_state(task.id, target)
        store.append_event(task.id, None, "question", {"text": "Should add() take floats too?"})
        links = LinkStore(store.engine)
        links.add(Link(task.id, kind, forge.base_url, on.repo, issue=number, requested_by=owner))
        handler = WebhookHandler(service, links, forge, settings, token, separate_numbers=kind == "gitlab")
        yield Waiting(on, kind, number, task.id, handler, store)


def test_errands_own_comments_are_no_answer_on_gitea_and_gitlab(waiting: Waiting) -> None:
    for body in (f"@acme errand's task `{waiting.task_id}` has a question:\n\n> Should add() take floats too?",
                 f"errand pushed 0123456789ab to `errand/x` (task `{waiting.task_id}`).", "@errand yes"):
        heard = waiting.say(body, user=ME)
        assert heard.action == "ignored"
        assert heard.detail == f"errand's own writing (@{ME} is the account errand's token acts as)"
    assert waiting.store.get_task(waiting.task_id).state == "needs_input" and waiting.answers() == []
    answered = waiting.say("Integers only.", user="acme")
    assert answered.action == "answered" and waiting.answers() == ["Integers only."]


def test_a_command_while_a_question_waits_is_a_command_on_gitea_and_gitlab(waiting: Waiting) -> None:
    said = waiting.say("@errand accept", user="acme")
    assert said.action == "ignored" and "still open" in said.detail
    author, body = waiting.comments()[-1]
    assert author == ME and f"Task `{waiting.task_id}`'s question is still open" in body
    assert waiting.store.get_task(waiting.task_id).state == "needs_input" and waiting.answers() == []
