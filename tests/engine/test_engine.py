"""The local engine end to end: real sandboxes, real git, a real SQLite store, scripted models."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from errand.agent import Budgets
from errand.sandbox import AsyncSandbox
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import RunState
from errand.tasks.round import steps
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore

from .harness import (
    FINISH,
    FIX,
    FIX_SCRIPT,
    READ,
    TEST,
    GatedModel,
    git,
    make_repo,
    per_attempt,
    running_engine,
    scripted,
    wait_for_event,
    wait_for_state,
    worktree_state,
)

S = TaskState

# Each engine on the store it is deployed with: the local engine on one machine's SQLite, the Temporal
# engine on the PostgreSQL its machines share. Every engine and every store runs each behaviour; the
# other two pairings ran the same code again (an engine reaches its store only through TaskStore).
pytestmark = pytest.mark.parametrize(("engine_kind", "store"), [
    pytest.param("local", "sqlite", id="local-sqlite"),
    pytest.param("temporal", "postgresql", id="temporal-postgresql", marks=pytest.mark.slow)], indirect=True)


def submit(service: TaskService, repo: Path, script_file: Path, text: str = "Make test_calc.py pass",
           **options: object) -> str:
    return service.submit(text, repo=repo, model=f"scripted:{script_file}", **options).id  # type: ignore[arg-type]


class _Unreadable:
    """A distilling model whose answer errand cannot read: the kind of bug, ours or a provider's,
    that distilling a finished task may meet."""

    name = "unreadable"

    async def complete(self, messages: object, tools: object) -> object:
        raise AttributeError("'str' object has no attribute 'content'")


async def test_a_distillation_that_breaks_leaves_the_task_ready_for_review_and_says_why(
        engine_kind: str, store: TaskStore, service: TaskService, repo: Path, script_file: Path) -> None:
    task_id = submit(service, repo, script_file)
    model = scripted(FIX_SCRIPT)
    async with running_engine(store, lambda _s, _i: model, kind=engine_kind,
                              distiller=lambda _endpoint: _Unreadable()):
        failed = await wait_for_event(store, task_id, lambda event: event.kind == "distill_failed")
        await wait_for_state(store, task_id, S.READY_FOR_REVIEW, S.FAILED)
    assert "AttributeError" in failed.data["reason"]
    assert store.get_task(task_id).state is S.READY_FOR_REVIEW, store.events(task_id)[-3:]
    assert [e.kind for e in store.events(task_id) if e.kind in ("ready_for_review", "failed")] == ["ready_for_review"]
    [run] = store.runs(task_id)
    assert run.state is RunState.SUCCEEDED


async def test_a_task_fixes_the_failing_test_and_is_accepted_on_its_branch(
        engine_kind: str, store: TaskStore, service: TaskService, repo: Path, script_file: Path) -> None:
    before = worktree_state(repo)
    task_id = submit(service, repo, script_file)
    model = scripted(FIX_SCRIPT)
    async with running_engine(store, lambda _s, _i: model, kind=engine_kind):
        task = await wait_for_state(store, task_id, S.READY_FOR_REVIEW, S.FAILED)
    assert task.state is S.READY_FOR_REVIEW, store.events(task_id)[-3:]
    run = service.chosen_run(task_id)
    evidence = service.evidence(run)
    assert evidence is not None
    assert evidence.tests_before is not None and not evidence.tests_before.ok
    assert evidence.tests_after is not None and evidence.tests_after.ok and evidence.tests_after.passed == 1
    assert [f["path"] for f in evidence.files] == ["calc.py"]
    assert evidence.confidence.level == "high", evidence.confidence.reasons
    assert "+    return a + b" in run.result["patch"]
    kinds = [e.kind for e in store.events(task_id)]
    assert kinds.index("round_started") < kinds.index("model") < kinds.index("ready_for_review")
    assert "tests_before" in kinds and "output" in kinds

    accepted = service.accept(task_id)
    assert accepted.branch == task.branch and accepted.branch.startswith(f"errand/{task_id}-make-test")
    assert git(repo, "rev-parse", accepted.branch).strip() == accepted.commit
    assert "return a + b" in git(repo, "show", f"{accepted.branch}:calc.py")
    assert git(repo, "log", "-1", "--format=%s", accepted.branch).strip() == "add() subtracted; now it adds"
    assert f"Task: Make test_calc.py pass\n\nerrand-task: {task_id}" in git(repo, "log", "-1", "--format=%B",
                                                                              accepted.branch)
    assert worktree_state(repo) == before
    assert store.get_task(task_id).state is S.ACCEPTED
    assert not list((Path(store.engine.url.database or "").parent).glob("work/*"))


async def test_ask_user_pauses_the_sandbox_and_an_answer_resumes_the_same_run(
        engine_kind: str, store: TaskStore, service: TaskService, repo: Path, script_file: Path) -> None:
    model = scripted([[READ], [("ask_user", {"question": "Should add() accept strings?"})], [FIX], [FINISH]])
    task_id = submit(service, repo, script_file)
    async with running_engine(store, lambda _s, _i: model, kind=engine_kind) as engine:
        await wait_for_state(store, task_id, S.NEEDS_INPUT)
        [sandbox] = engine.sandboxes(task_id)
        if engine_kind == "local":
            assert sandbox is not None and sandbox.paused  # frozen in this process until the answer
        else:
            assert sandbox is None  # ended: a durable wait holds nothing but the saved conversation
        question = await wait_for_event(store, task_id, lambda e: e.kind == "question")
        assert question.data["text"] == "Should add() accept strings?"
        service.answer(task_id, "No, numbers only.")
        task = await wait_for_state(store, task_id, S.READY_FOR_REVIEW, S.FAILED)
    assert task.state is S.READY_FOR_REVIEW
    [run] = store.runs(task_id)
    assert run.state is RunState.SUCCEEDED  # one run, resumed, not a second one
    assert model.calls[2][0][-1].content == "The user answered: No, numbers only."
    delivered = [e for e in store.events(task_id) if e.kind == "answer_delivered"]
    assert [e.data["text"] for e in delivered] == ["No, numbers only."]


async def test_a_message_mid_run_is_delivered_at_the_next_step(
        engine_kind: str, store: TaskStore, service: TaskService, repo: Path, script_file: Path) -> None:
    model = GatedModel([[READ], [FIX], [TEST], [FINISH]], gate_at=2)
    task_id = submit(service, repo, script_file)
    async with running_engine(store, lambda _s, _i: model, kind=engine_kind) as engine:
        await asyncio.wait_for(model.waiting.wait(), 60)
        ref = service.message(task_id, "Keep double() as it is.")
        while not any(live.messages for live in engine.bench.rounds.values()):  # the engine has it
            await asyncio.sleep(0.01)
        model.gate.set()
        await wait_for_state(store, task_id, S.READY_FOR_REVIEW)
    assert "Keep double() as it is." not in str(model.calls[1][0])  # the step under way did not see it
    assert model.calls[2][0][-1].content.endswith("Keep double() as it is.")
    [delivered] = [e for e in store.events(task_id) if e.kind == "message_delivered"]
    assert delivered.data["ref"] == ref


async def test_cancel_stops_the_run_and_leaves_nothing_behind(
        engine_kind: str, store: TaskStore, service: TaskService, repo: Path, script_file: Path) -> None:
    model = scripted([[("shell", {"command": "sleep 600"})], [FINISH]])
    task_id = submit(service, repo, script_file)
    async with running_engine(store, lambda _s, _i: model, kind=engine_kind):
        await wait_for_event(store, task_id, lambda e: e.kind == "tool_call")
        ids_before = {info.id for info in await AsyncSandbox.list()}
        assert ids_before
        service.cancel(task_id)
        [run] = store.runs(task_id)
        while store.get_run(run.id).state is RunState.RUNNING:
            await asyncio.sleep(0.02)
    assert store.get_task(task_id).state is S.CANCELLED
    assert store.get_run(run.id).state is RunState.CANCELLED
    assert not ids_before & {info.id for info in await AsyncSandbox.list()}


async def test_cancel_while_the_round_sets_up_ends_it_and_leaves_nothing_behind(
        engine_kind: str, store: TaskStore, service: TaskService, tmp_path: Path, script_file: Path) -> None:
    # The round is still starting (setting up, before any agent): on Temporal, one activity begins
    # and prepares it, and a cancel there must still end its runs, sandboxes and working copies.
    toml = f'[setup]\ncommands = ["echo {tmp_path.name}; sleep 600"]\n'
    repo = make_repo(tmp_path / "slow-setup", toml=toml)
    task_id = submit(service, repo, script_file)
    async with running_engine(store, lambda _s, _i: scripted(FIX_SCRIPT), kind=engine_kind):
        await wait_for_event(store, task_id, lambda e: e.kind == "setup_output")
        ids_before = {info.id for info in await AsyncSandbox.list()}
        service.cancel(task_id)
        [run] = store.runs(task_id)
        deadline = time.monotonic() + 120
        while store.get_run(run.id).state is RunState.RUNNING or steps.work_dir(run).exists():
            assert time.monotonic() < deadline, (store.get_run(run.id).state, steps.work_dir(run).exists())
            await asyncio.sleep(0.02)
    assert store.get_task(task_id).state is S.CANCELLED
    assert store.get_run(run.id).state is RunState.CANCELLED
    assert not ids_before & {info.id for info in await AsyncSandbox.list()}
    assert not {"model", "tool_call"} & {e.kind for e in store.events(task_id)}  # no agent began


async def test_a_follow_up_continues_the_work_and_lands_on_the_same_branch(
        engine_kind: str, store: TaskStore, service: TaskService, repo: Path, script_file: Path) -> None:
    first = scripted(FIX_SCRIPT)
    second = scripted([[("edit_file", {"path": "calc.py", "old": "return x + x + 1", "new": "return x * 2"})],
                       [TEST], [FINISH]])
    models = iter([first, second])
    task_id = submit(service, repo, script_file)
    async with running_engine(store, lambda _s, _i: next(models), kind=engine_kind):
        await wait_for_state(store, task_id, S.READY_FOR_REVIEW)
        service.followup(task_id, "double() is off by one too; fix it")
        await wait_for_state(store, task_id, S.QUEUED, S.PREPARING, S.RUNNING, S.READY_FOR_REVIEW)
        while len(store.runs(task_id)) < 2 or store.get_task(task_id).state is not S.READY_FOR_REVIEW:
            await asyncio.sleep(0.02)
    assert "double() is off by one too" in second.calls[0][0][1].content
    run = service.chosen_run(task_id)
    assert run.round == 2
    accepted = service.accept(task_id)
    calc = git(repo, "show", f"{accepted.branch}:calc.py")
    assert "return a + b" in calc and "return x * 2" in calc  # both rounds' work, one commit
    assert git(repo, "rev-list", "--count", f"main..{accepted.branch}").strip() == "1"


async def test_best_of_three_ranks_attempts_by_evidence(
        engine_kind: str, store: TaskStore, service: TaskService, repo: Path, script_file: Path) -> None:
    noisy_fix = ("write_file", {"path": "calc.py", "content": "def add(a, b):\n    # add two numbers\n"
                                "    result = a + b\n    return result\n\n\ndef double(x):\n    return x + x + 1\n"})
    factory, models = per_attempt(
        [[("write_file", {"path": "notes.txt", "content": "looked at it\n"})], [FINISH]],  # tests still fail
        [[noisy_fix], [FINISH]],  # passes, bigger diff
        [[FIX], [FINISH]],  # passes, smallest diff
    )
    task_id = submit(service, repo, script_file, attempts=3)
    async with running_engine(store, factory, kind=engine_kind):
        await wait_for_state(store, task_id, S.READY_FOR_REVIEW, S.FAILED)
    ranked = service.round_runs(task_id)
    # The engine stopped at once: the round's working copies are gone all the same, none left mounted.
    assert not [run.id for run in ranked if steps.work_dir(run).exists()]
    assert [r.attempt for r in ranked] == [3, 2, 1]
    assert [r.result["rank"] for r in ranked] == [1, 2, 3]
    assert all(len(m.calls) == 2 for m in models)
    [ranking] = [e for e in store.events(task_id) if e.kind == "ranking"]
    assert ranking.data["runs"] == [r.id for r in ranked]
    assert service.evidence(ranked[2]).tests_after.ok is False  # type: ignore[union-attr]
    accepted = service.accept(task_id)
    assert accepted.run_id == ranked[0].id


async def test_the_step_budget_ends_a_run_that_goes_nowhere(
        engine_kind: str, store: TaskStore, service: TaskService, repo: Path, script_file: Path) -> None:
    model = scripted([[("shell", {"command": f"echo {n}"})] for n in range(10)])
    task_id = submit(service, repo, script_file)
    async with running_engine(store, lambda _s, _i: model, budgets=Budgets(max_steps=3), kind=engine_kind):
        task = await wait_for_state(store, task_id, S.READY_FOR_REVIEW, S.FAILED)
    assert task.state is S.FAILED
    assert len(model.calls) == 3
    [run] = store.runs(task_id)
    assert run.result["status"] == "budget_exhausted" and run.result["budget"] == "steps"
    [failed] = [e for e in store.events(task_id) if e.kind == "failed"]
    assert "budget_exhausted" in failed.data["reason"]


async def test_the_stuck_detector_ends_a_run_repeating_itself(
        engine_kind: str, store: TaskStore, service: TaskService, repo: Path, script_file: Path) -> None:
    model = scripted([[FIX], [READ], [READ], [READ], [READ], [FINISH]])
    task_id = submit(service, repo, script_file)
    async with running_engine(store, lambda _s, _i: model, kind=engine_kind):
        task = await wait_for_state(store, task_id, S.READY_FOR_REVIEW, S.FAILED)
    [run] = store.runs(task_id)
    assert run.result["status"] == "stuck"
    # It changed something before it got stuck: the work is kept for review, with low confidence.
    assert task.state is S.READY_FOR_REVIEW
    evidence = service.evidence(run)
    assert evidence is not None and evidence.confidence.level == "low"
    assert "did not finish (stuck)" in evidence.confidence.reasons[0]


async def test_git_works_in_the_working_copy_and_the_pristine_checkout_stays_pristine(
        engine_kind: str, store: TaskStore, service: TaskService, repo: Path, script_file: Path) -> None:
    look = "git status --short && git diff --stat && git log -1 --format=%s"
    commit = "git add -A && git -c user.email=a@b -c user.name=a commit -qm wip"
    model = scripted([[FIX], [("shell", {"command": look})], [("shell", {"command": commit})], [FINISH]])
    models = iter([model, scripted(FIX_SCRIPT)])
    async with running_engine(store, lambda _s, _i: next(models), concurrency=1, kind=engine_kind):
        # One after the other: the models go to rounds in the order they start, which Temporal does not
        # promise for two tasks queued together.
        first = submit(service, repo, script_file)
        await wait_for_state(store, first, S.READY_FOR_REVIEW, S.FAILED)
        second = submit(service, repo, script_file)
        await wait_for_state(store, second, S.READY_FOR_REVIEW, S.FAILED)
    results = [e.data for e in store.events(first, kinds=["tool_result"]) if e.data["name"] == "shell"]
    assert [r["exit_code"] for r in results] == [0, 0], [r["content"] for r in results]
    assert " M calc.py" in results[0]["content"] and "initial" in results[0]["content"]
    # The agent's commit changed its own .git only; the next task starts from the same clean base,
    # and the diff is still taken against the base commit.
    assert "+    return a + b" in service.chosen_run(first).result["patch"]
    second_evidence = service.evidence(service.chosen_run(second))
    assert second_evidence is not None and second_evidence.tests_before is not None
    assert not second_evidence.tests_before.ok
    assert [f["path"] for f in second_evidence.files] == ["calc.py"]


async def test_a_task_from_a_git_url_is_accepted_into_a_local_clone(
        engine_kind: str, store: TaskStore, service: TaskService, repo: Path, script_file: Path,
        tmp_path: Path) -> None:
    url = f"file://{repo}"
    task = service.submit("Make test_calc.py pass", repo=url, model=f"scripted:{script_file}")
    assert task.repo == url and task.base_commit == git(repo, "rev-parse", "HEAD").strip()
    model = scripted(FIX_SCRIPT)
    async with running_engine(store, lambda _s, _i: model, kind=engine_kind):
        await wait_for_state(store, task.id, S.READY_FOR_REVIEW)
    from errand.errors import ConfigError

    try:
        service.accept(task.id)
    except ConfigError as error:
        assert error.code == "needs_local_repo"
    else:
        raise AssertionError("accepting a URL task needs --into")
    accepted = service.accept(task.id, into=repo)
    assert "return a + b" in git(repo, "show", f"{accepted.branch}:calc.py")
