from __future__ import annotations

import itertools
import sqlite3
import threading
from pathlib import Path

import pytest

from errand.tasks.errors import IllegalTransition, RunNotFound, RunNotRunning, StateConflict, TaskNotFound
from errand.tasks.lifecycle import TRANSITIONS, TaskState
from errand.tasks.records import RunState, Verdict
from errand.tasks.store.tasks import TaskStore

S = TaskState

# A path through the lifecycle reaching each state, from queued.
PATH_TO = {
    S.QUEUED: [],
    S.PREPARING: [S.PREPARING],
    S.RUNNING: [S.PREPARING, S.RUNNING],
    S.NEEDS_INPUT: [S.PREPARING, S.RUNNING, S.NEEDS_INPUT],
    S.READY_FOR_REVIEW: [S.PREPARING, S.RUNNING, S.READY_FOR_REVIEW],
    S.ACCEPTED: [S.PREPARING, S.RUNNING, S.READY_FOR_REVIEW, S.ACCEPTED],
    S.REJECTED: [S.PREPARING, S.RUNNING, S.READY_FOR_REVIEW, S.REJECTED],
    S.ANSWERED: [S.PREPARING, S.RUNNING, S.ANSWERED],
    S.FAILED: [S.FAILED],
    S.CANCELLED: [S.CANCELLED],
}


def task_in(store: TaskStore, state: TaskState) -> str:
    task_id = store.create_task(title="Fix the test", instruction="make it pass", repo="/repo").id
    for step in PATH_TO[state]:
        store.set_state(task_id, step)
    return task_id


def test_create_and_get(store: TaskStore) -> None:
    task = store.create_task(title="Fix: the flaky test!", instruction="do it", repo="/r", model="openai:m")
    assert task.id.startswith("t-") and len(task.id) == 10
    assert task.state is S.QUEUED
    assert task.branch == f"errand/{task.id}-fix-the-flaky-test"
    assert store.get_task(task.id) == task
    with pytest.raises(TaskNotFound):
        store.get_task("t-00000000")


def test_set_state_over_the_whole_matrix(store: TaskStore) -> None:
    # Every pair in one store: a database per pair cost 81 PostgreSQL databases for one table.
    for current, target in sorted(itertools.product(TaskState, TaskState)):
        task_id = task_in(store, current)
        before = store.get_task(task_id)
        if target in TRANSITIONS[current]:
            assert store.set_state(task_id, target).state is target, (current, target)
        else:
            with pytest.raises(IllegalTransition) as caught:
                store.set_state(task_id, target)
            assert caught.value.task_id == task_id, (current, target)
            assert store.get_task(task_id) == before, (current, target)


def test_expected_state_is_compare_and_set(store: TaskStore) -> None:
    task_id = task_in(store, S.RUNNING)
    with pytest.raises(StateConflict) as caught:
        store.set_state(task_id, S.CANCELLED, expected=S.QUEUED)
    assert (caught.value.expected, caught.value.actual) == ("queued", "running")
    assert store.get_task(task_id).state is S.RUNNING


@pytest.mark.parametrize("expected", [S.QUEUED, None])
def test_concurrent_setters_exactly_one_wins(url: str, expected: TaskState | None) -> None:
    stores = [TaskStore.open(url) for _ in range(4)]
    try:
        for _ in range(10):
            task_id = task_in(stores[0], S.QUEUED)
            barrier = threading.Barrier(len(stores))
            outcomes: list[str] = []

            def claim(
                store: TaskStore, task_id: str = task_id, barrier: threading.Barrier = barrier,
                outcomes: list[str] = outcomes,
            ) -> None:
                barrier.wait()
                try:
                    store.set_state(task_id, S.PREPARING, expected=expected)
                    outcomes.append("won")
                except (StateConflict, IllegalTransition):
                    outcomes.append("lost")

            threads = [threading.Thread(target=claim, args=(store,)) for store in stores]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(outcomes) == ["lost"] * (len(stores) - 1) + ["won"]
            assert stores[0].get_task(task_id).state is S.PREPARING
    finally:
        for store in stores:
            store.close()


def test_events_keep_order_and_seq_per_run(store: TaskStore) -> None:
    task_id = task_in(store, S.RUNNING)
    first, second = store.start_run(task_id, "w1"), store.start_run(task_id, "w1")
    assert (first.attempt, second.attempt) == (1, 2)
    ids = []
    for index in range(25):
        run = first if index % 2 else second
        ids.append(store.append_event(task_id, run.id, "step", {"n": index}))
    ids.append(store.append_event(task_id, None, "note", None))
    assert ids == sorted(ids)
    everything = store.events(task_id)
    assert [event.id for event in everything] == ids
    assert [e.seq for e in everything if e.run_id == first.id] == list(range(1, 13))
    assert [e.seq for e in everything if e.run_id == second.id] == list(range(1, 14))
    assert everything[-1].seq is None and everything[-1].data == {}
    assert [e.data["n"] for e in everything[:-1]] == list(range(25))

    paged, after = [], 0
    while page := store.events(task_id, after_id=after, limit=4):
        assert len(page) <= 4
        paged.extend(page)
        after = page[-1].id
    assert paged == everything
    assert store.events(task_id, after_id=ids[10]) == everything[11:]


def test_an_event_of_a_run_not_the_tasks_or_of_no_task_is_refused_and_nothing_written(store: TaskStore) -> None:
    task_id, other = task_in(store, S.RUNNING), task_in(store, S.RUNNING)
    run = store.start_run(other, "w1")
    with pytest.raises(RunNotFound):
        store.append_event(task_id, run.id, "step", {})
    with pytest.raises(RunNotFound):
        store.append_event(task_id, "r-none", "step", {})
    with pytest.raises(TaskNotFound):
        store.append_event("t-00000000", None, "note", {})
    assert store.events(task_id) == []
    assert store.append_event(other, run.id, "step", {}) and [e.seq for e in store.events(other)] == [1]


def test_concurrent_appenders_get_distinct_gapless_seqs(url: str) -> None:
    stores = [TaskStore.open(url) for _ in range(3)]
    try:
        task_id = task_in(stores[0], S.RUNNING)
        run = stores[0].start_run(task_id, "w")

        def append(store: TaskStore) -> None:
            for _ in range(20):
                store.append_event(task_id, run.id, "chunk", {})

        threads = [threading.Thread(target=append, args=(store,)) for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [event.seq for event in stores[0].events(task_id)] == list(range(1, 61))
    finally:
        for store in stores:
            store.close()


def test_finish_run(store: TaskStore) -> None:
    task_id = task_in(store, S.RUNNING)
    run = store.start_run(task_id, "w")
    finished = store.finish_run(run.id, RunState.SUCCEEDED, {"diff": "+x"})
    assert finished.state is RunState.SUCCEEDED and finished.result == {"diff": "+x"} and finished.ended_at
    with pytest.raises(RunNotRunning):
        store.finish_run(run.id, RunState.FAILED)
    assert store.get_run(run.id) == finished


def test_reviews_move_the_task(store: TaskStore) -> None:
    task_id = task_in(store, S.READY_FOR_REVIEW)
    store.start_run(task_id, "w")
    review = store.add_review(task_id, Verdict.REJECTED, "wrong file")
    assert store.get_task(task_id).state is S.REJECTED
    store.add_review(task_id, "followup", "edit the other file")
    assert store.get_task(task_id).state is S.QUEUED
    with pytest.raises(IllegalTransition):
        store.add_review(task_id, Verdict.ACCEPTED)
    assert [r.verdict for r in store.reviews(task_id)] == [Verdict.REJECTED, Verdict.FOLLOWUP]
    assert store.reviews(task_id)[0] == review and review.run_id == f"{task_id}-r1"


def test_list_tasks_keyset_pagination(store: TaskStore) -> None:
    created = [store.create_task(title=f"t{n}", instruction="i", repo=f"/r{n % 2}") for n in range(23)]
    for task in created[::3]:
        store.set_state(task.id, S.CANCELLED)
    newest_first = sorted(created, key=lambda task: (task.created_at, task.id), reverse=True)

    def walk(**filters: object) -> list[str]:
        seen: list[str] = []
        before = None
        while page := store.list_tasks(limit=5, before=before, **filters):  # type: ignore[arg-type]
            seen.extend(task.id for task in page)
            before = page[-1].id
        return seen

    assert walk() == [task.id for task in newest_first]
    assert walk(repo="/r1") == [task.id for task in newest_first if task.repo == "/r1"]
    cancelled = {task.id for task in created[::3]}
    assert walk(state=S.CANCELLED) == [task.id for task in newest_first if task.id in cancelled]
    # A task created after the walk began does not shift later pages.
    first_page = store.list_tasks(limit=5)
    store.create_task(title="new", instruction="i", repo="/r0")
    assert store.list_tasks(limit=5, before=first_page[-1].id)[0].id == newest_first[5].id


def test_runs_of_one_claim_share_a_round(store: TaskStore) -> None:
    task = store.create_task(title="t", instruction="i", repo="/r", attempts=2)
    assert store.next_round(task.id) == 1
    first = store.start_run(task.id, "w", round=1)
    second = store.start_run(task.id, "w", round=1)
    assert [(r.attempt, r.round) for r in (first, second)] == [(1, 1), (2, 1)]
    assert store.next_round(task.id) == 2
    third = store.start_run(task.id, "w")
    assert third.round == 2
    assert [r.id for r in store.runs(task.id, round=1)] == [first.id, second.id]


def test_claim_next_takes_the_oldest_queued_task_once(store: TaskStore) -> None:
    older = store.create_task(title="a", instruction="i", repo="/r")
    newer = store.create_task(title="b", instruction="i", repo="/r")
    claimed = store.claim_next("w1")
    assert claimed is not None and claimed.id == older.id and claimed.state is TaskState.PREPARING
    again = store.claim_next("w2")
    assert again is not None and again.id == newer.id
    assert store.claim_next("w3") is None


def test_an_idle_claim_does_not_wait_for_the_write_lock(tmp_path: Path) -> None:
    """A worker asks for work several times a second: with nothing queued it only reads, so a
    long write elsewhere (here, SQLite's write lock held by another process's transaction) does
    not hold it up, nor it the writer."""
    url = f"sqlite:///{tmp_path / 'errand.db'}"
    with TaskStore.open(url) as store:
        writer = sqlite3.connect(tmp_path / "errand.db", isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        try:
            assert store.claim_next("w1") is None
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        queued = store.create_task(title="a", instruction="i", repo="/r")
        claimed = store.claim_next("w1")
        assert claimed is not None and claimed.id == queued.id


def test_controls_are_each_held_tasks_state_and_what_people_sent_it_since_its_own_mark(store: TaskStore) -> None:
    one = store.create_task(title="a", instruction="i", repo="/r")
    two = store.create_task(title="b", instruction="i", repo="/r")
    first = store.append_event(one.id, None, "message_sent", {"text": "first"})
    store.append_event(two.id, None, "message_sent", {"text": "to two, before its mark"})
    mark = store.append_event(two.id, None, "model", {})
    store.append_event(one.id, None, "model", {})  # not a control
    second = store.append_event(one.id, None, "answer_sent", {"text": "second"})
    later = store.append_event(two.id, None, "message_sent", {"text": "to two"})
    store.set_state(two.id, S.CANCELLED)
    polled = store.controls({one.id: 0, two.id: mark, "t-gone00000": 0}, ["message_sent", "answer_sent"])
    assert set(polled) == {one.id, two.id}  # a task no longer in the store is left out
    assert polled[one.id][0] is S.QUEUED and [e.id for e in polled[one.id][1]] == [first, second]
    assert polled[two.id][0] is S.CANCELLED and [e.id for e in polled[two.id][1]] == [later]
    assert store.controls({one.id: second}, ["message_sent", "answer_sent"]) == {one.id: (S.QUEUED, [])}
    assert store.controls({}, ["message_sent"]) == {}


def test_events_filter_by_kind_and_run(store: TaskStore) -> None:
    task = store.create_task(title="t", instruction="i", repo="/r")
    run = store.start_run(task.id, "w")
    store.append_event(task.id, None, "answer", {"text": "yes"})
    store.append_event(task.id, run.id, "model", {})
    store.append_event(task.id, None, "message", {"text": "hi"})
    assert [e.kind for e in store.events(task.id, kinds=["answer", "message"])] == ["answer", "message"]
    assert [e.kind for e in store.events(task.id, run_id=run.id)] == ["model"]


def test_last_event_is_the_newest_of_its_kinds(store: TaskStore) -> None:
    task = store.create_task(title="t", instruction="i", repo="/r")
    assert store.last_event(task.id, ["question"]) is None
    first = store.append_event(task.id, None, "question", {"text": "a"})
    store.append_event(task.id, None, "message_sent", {"text": "b"})
    assert store.last_event(task.id, ["question"]).id == first  # type: ignore[union-attr]
    newest = store.append_event(task.id, None, "question", {"text": "c"})
    assert store.last_event(task.id, ["question", "answer_sent"]).id == newest  # type: ignore[union-attr]


def test_a_tasks_branch_is_named_by_the_one_rule_the_repository_layer_keeps(store: TaskStore) -> None:
    from errand.repo.accept import branch_name

    accented = store.create_task(title="Café: fix the año parser", instruction="x", repo="/r")
    assert accented.branch == branch_name(accented.id, accented.title)
    assert accented.branch == f"errand/{accented.id}-cafe-fix-the-ano-parser"
    bare = store.create_task(title="!!!", instruction="x", repo="/r")
    assert bare.branch == f"errand/{bare.id}"


def test_a_task_the_host_did_is_ready_for_review_in_one_step_and_never_claimed(store: TaskStore) -> None:
    queued = store.create_task(title="Fix add", instruction="Fix add()", repo="/r")
    done = store.create_reviewable(title="Export project memory into AGENTS.md", instruction="export", repo="/r",
                                   base_ref="HEAD", base_commit="c" * 40, worker="host:memory-export",
                                   result={"rank": 1, "patch": "diff --git a/x b/x\n",
                                           "evidence": {"confidence": {"level": "high"}}},
                                   events=[("memories_exported", {"file": "AGENTS.md", "ids": [1], "kinds": {}})])
    assert store.get_task(done.id).state is TaskState.READY_FOR_REVIEW
    [run] = store.runs(done.id)
    assert (run.state, run.round, run.attempt, run.result["rank"]) == (RunState.SUCCEEDED, 1, 1, 1)
    assert [(e.kind, e.run_id, e.seq) for e in store.events(done.id)] == [
        ("memories_exported", run.id, 1), ("ready_for_review", None, None)]
    assert store.events(done.id)[-1].data == {"run_id": run.id, "confidence": "high"}
    claimed = store.claim_next("w1")
    assert claimed is not None and claimed.id == queued.id and store.claim_next("w1") is None
    assert store.add_review(done.id, Verdict.ACCEPTED, None).verdict is Verdict.ACCEPTED
