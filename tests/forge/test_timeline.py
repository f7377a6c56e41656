"""What the forge writes in a task's log: each event's data as a person reads it, and the ones the
forge reads back (the CI last read, the issue taken) as they were written, older ones too."""

from __future__ import annotations

from pathlib import Path

from errand.forge.links import PostedQuestion, Round
from errand.forge.timeline import (
    FollowupAsked,
    IssueTaken,
    PullOpened,
    QuestionPosted,
    last_issue,
    note,
)
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore


def test_the_ci_read_back_is_the_event_it_wrote_and_an_older_one_reads_too(tmp_path: Path) -> None:
    from errand.forge.records import CheckState
    from errand.forge.timeline import Check, ChecksRead, last_checks, note

    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        service = TaskService(store, memory=None)
        task = store.create_task(title="t", instruction="i", repo="/r")
        assert last_checks(service, task.id) is None
        read = ChecksRead.of("c" * 40, [CheckState("tests", "failure", "http://ci.test/1"),
                                        CheckState("lint", "pending")])
        note(service, task.id, read)
        assert last_checks(service, task.id) == read
        [event] = service.events(task.id, kinds=["forge_checks"])  # what the log and the API show, as before
        assert event.data == {"commit": "c" * 40, "checks": [
            {"name": "tests", "state": "failure", "url": "http://ci.test/1"},
            {"name": "lint", "state": "pending", "url": None}]}
        store.append_event(task.id, None, "forge_checks", {"commit": "d" * 40, "checks": [{"name": "tests",
                                                                                            "state": "success"}]})
        assert last_checks(store, task.id) == ChecksRead("d" * 40, (Check("tests", "success", None),))


def test_the_issue_taken_reads_back_and_an_event_missing_fields_reads_as_their_defaults(tmp_path: Path) -> None:
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        service = TaskService(store, memory=None)
        task = store.create_task(title="t", instruction="i", repo="/r")
        assert last_issue(service, task.id) is None
        taken = IssueTaken("acme/calc#4", "http://forge.test/acme/calc/issues/4", "octo")
        note(service, task.id, taken)
        assert last_issue(service, task.id) == taken
        store.append_event(task.id, None, IssueTaken.KIND, {"issue": "acme/calc#5"})
        assert last_issue(service, task.id) == IssueTaken("acme/calc#5", "", None)


def test_each_event_writes_the_fields_a_person_reads() -> None:
    asked = Round("t-1", 7, "errand/fix", "a" * 40, requested_by="octo", threads=(3, 4), fork="someone/calc",
                  push_repo="someone/calc")
    assert FollowupAsked(asked).to_data() == {
        "pull": 7, "branch": "errand/fix", "head": "a" * 40, "requested_by": "octo", "threads": [3, 4], "ci": False,
        "fork": "someone/calc", "push_repo": "someone/calc", "fork_pull": None}
    assert QuestionPosted(PostedQuestion("t-1", 12, 7, 99)).to_data() == {"question": 12, "on": 7, "comment": 99}
    assert PullOpened(7, "http://forge.test/pull/7", "errand/fix").to_data() == {
        "number": 7, "url": "http://forge.test/pull/7", "branch": "errand/fix"}
