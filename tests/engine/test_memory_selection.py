"""What a task is given beyond one similarity query, as a real round gives it: rules by their
activation mode, memories scoped to the files the agent opens, reserved places for pitfalls and
preferences, and no instruction text twice."""

from __future__ import annotations

from pathlib import Path

from errand.memory import MemoryStore, Provenance
from errand.memory.rules import Activation
from errand.models import Message
from errand.tasks.lifecycle import TaskState
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from memory.crowded import CONVENTIONS, PITFALL, QUERY
from postgres import on_sqlite_only

from .cli import errand, errand_json, script
from .harness import FINISH, FIX, TEST, make_repo, per_attempt, running_engine, scripted, wait_for_state

AGENTS = """\
# Agents

Keep calc.py free of third-party imports.

## Tests

Run the tests with:

```
python3 test_calc.py
```
"""

RULES = {
    ".cursor/rules/style.mdc": "---\ndescription: Docstring style\nalwaysApply: true\n---\n"
                               "Write docstrings in the imperative mood.\n",
    ".cursor/rules/api.mdc": "---\ndescription: API handlers\nglobs: src/api/**/*.py\nalwaysApply: false\n---\n"
                             "# API handlers\n\nValidate every request body with pydantic models before use.\n\n"
                             "Return errors as RFC 9457 problem documents.\n",
    ".cursor/rules/money.mdc": "---\ndescription: Rounding money amounts in invoices\n---\n"
                               "Use decimal.Decimal with ROUND_HALF_EVEN, never the float round().\n",
    ".cursor/rules/release.mdc": "---\nalwaysApply: false\n---\n"
                                 "Bump the version in pyproject.toml before tagging a release.\n",
    "src/db/AGENTS.md": "Every query goes through db.session(); never open raw connections.\n",
    "src/api/__init__.py": "",
    "src/api/users.py": "def get_user(user_id):\n    return {'id': user_id}\n",
    "src/api/orders.py": "def get_order(order_id):\n    return {'id': order_id}\n",
    "src/db/__init__.py": "",
    "src/db/models.py": "class User:\n    pass\n",
    "pyproject.toml": '[project]\nname = "calc"\nversion = "0.1.0"\n',
}

READ_USERS = ("read_file", {"path": "src/api/users.py"})
EDIT_USERS = ("edit_file", {"path": "/workspace/src/api/users.py", "old": "{'id': user_id}",
                            "new": "{'id': int(user_id)}"})
READ_ORDERS = ("read_file", {"path": "src/api/orders.py"})
READ_MODELS = ("read_file", {"path": "src/db/models.py"})
SCRIPT = [[READ_USERS], [EDIT_USERS], [READ_ORDERS], [READ_MODELS], [FIX], [TEST], [FINISH]]


def _system(messages: list[Message]) -> tuple[str, str]:
    """The system prompt's instructions and memories blocks."""
    system = messages[0].content

    def block(name: str) -> str:
        start = system.find(f"<{name}>")
        return system[start:system.index(f"</{name}>")] if start >= 0 else ""
    return block("instructions"), block("memories")


def _results(messages: list[Message]) -> list[str]:
    return [message.content for message in messages if message.role == "tool"]


@on_sqlite_only("store")  # the store plays no part in what a round is given of project memory
async def test_rules_are_given_by_their_activation_and_instruction_text_only_once(
        store: TaskStore, tmp_path: Path, script_file: Path) -> None:
    repo = make_repo(tmp_path / "project", files={"AGENTS.md": AGENTS, **RULES})
    memories = MemoryStore(store.engine)
    project = str(repo.resolve())
    # One memory cites users.py (it is given with the task, so opening the file does not repeat it);
    # one a person scoped to the API's files (it waits for them).
    citing = memories.add(project, "get_user in src/api/users.py is cached per request; clear the cache in tests.",
                          kind="pitfall", provenance=Provenance.person(), status="active")
    scoped = memories.add(project, "Handlers log the request id on every error path.", kind="convention",
                          provenance=Provenance.person(Activation("globs", ("src/api/**",)).detail()),
                          status="active")
    service = TaskService(store)
    task = service.submit("Round invoice totals to whole cents in calc.py, keeping calc.py import-free",
                          repo=repo, model=f"scripted:{script_file}", attempts=2)
    factory, models = per_attempt(SCRIPT, SCRIPT)
    async with running_engine(store, factory):
        await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW)

    for model in models:
        instructions, given = _system(model.calls[0][0])
        # Root instruction files and always-apply rules are in the prompt verbatim, and only there.
        assert "Keep calc.py free of third-party imports." in instructions and "python3 test_calc.py" in instructions
        assert "Write docstrings in the imperative mood." in instructions and "alwaysApply" not in instructions
        assert "source: AGENTS.md @" not in given and "imperative mood" not in given
        # A description-only rule is found by what the task is about; a manual one is never given unasked.
        assert "ROUND_HALF_EVEN" in given and ".cursor/rules/money.mdc @" in given
        assert "Bump the version" not in instructions + given
        # Glob-scoped rules wait for their files.
        assert "pydantic" not in instructions + given and "db.session()" not in instructions + given, given

        read_users, edited, read_orders, read_models = _results(model.calls[-1][0])[:4]
        assert "[project rules and memories for src/api/users.py" in read_users
        assert "Validate every request body with pydantic models" in read_users and "RFC 9457" in read_users
        assert f"[memory {scoped.id}] (convention) Handlers log the request id" in read_users
        assert f"[memory {citing.id}]" in given and f"[memory {citing.id}]" not in read_users
        assert edited.startswith("edited /workspace/src/api/users.py") and "project rules" not in edited
        assert "project rules" not in read_orders and "pydantic" not in read_orders  # once per attempt
        assert "db.session()" in read_models and "src/db/AGENTS.md @" in read_models
        assert "pydantic" not in read_models

    surfaced = store.events(task.id, kinds=["memories_surfaced"])
    assert sorted(event.data["path"] for event in surfaced) == ["src/api/users.py", "src/api/users.py",
                                                                 "src/db/models.py", "src/db/models.py"]
    assert {"given"} == {how for memory, how in memories.uses(task.id) if memory.id == scoped.id}


@on_sqlite_only("store")  # the store plays no part in what a round is given of project memory
async def test_a_manual_rule_is_given_when_the_task_names_it(
        store: TaskStore, tmp_path: Path, script_file: Path) -> None:
    repo = make_repo(tmp_path / "project", files={"AGENTS.md": AGENTS, **RULES})
    service = TaskService(store)
    unnamed = service.submit("Bump the version in pyproject.toml before tagging the release", repo=repo,
                             model=f"scripted:{script_file}")
    named = service.submit("Tag the 0.2.0 release; follow @release", repo=repo, model=f"scripted:{script_file}")
    models = [scripted([[FIX], [FINISH]]) for _ in range(2)]
    handed = iter(models)
    async with running_engine(store, lambda _spec, _index: next(handed), concurrency=1):
        await wait_for_state(store, unnamed.id, TaskState.READY_FOR_REVIEW)
        await wait_for_state(store, named.id, TaskState.READY_FOR_REVIEW)
    given = {"@release" in model.calls[0][0][1].content: _system(model.calls[0][0])[1] for model in models}
    assert "Bump the version" not in given[False]  # however alike the task, a manual rule is not retrieved
    assert "[memory" in given[True] and "Bump the version in pyproject.toml" in given[True]


@on_sqlite_only("store")  # the store plays no part in what a round is given of project memory
async def test_a_relevant_pitfall_and_preference_are_given_however_many_conventions_match_better(
        store: TaskStore, tmp_path: Path, script_file: Path) -> None:
    repo = make_repo(tmp_path / "project")
    memories = MemoryStore(store.engine)
    project = str(repo.resolve())
    for text in CONVENTIONS:
        memories.add(project, text, kind="convention", provenance=Provenance.person(), status="active")
    pitfall = memories.add(project, PITFALL, kind="pitfall", provenance=Provenance.person(), status="active")
    wanted = memories.add(project, "Reviewers want a before/after timing table in the summary of speed work.",
                          kind="preference", provenance=Provenance.person(), status="active")
    unrelated = memories.add(project, "Release notes are written in the past tense.", kind="preference",
                             provenance=Provenance.person(), status="active")
    service = TaskService(store)
    task = service.submit(QUERY, repo=repo, model=f"scripted:{script_file}")
    factory, _ = per_attempt([[FIX], [FINISH]])
    async with running_engine(store, factory):
        await wait_for_state(store, task.id, TaskState.READY_FOR_REVIEW)
    [given] = store.events(task.id, kinds=["memories_given"])
    assert len(given.data["ids"]) == 8
    assert pitfall.id in given.data["ids"] and wanted.id in given.data["ids"]
    assert unrelated.id not in given.data["ids"]  # a reserved place is for a relevant one only


def test_errand_run_surfaces_what_the_agent_did_not_recall_already(errand_home: Path, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "project", files={"AGENTS.md": AGENTS, **RULES})
    added = errand(errand_home, "memory", "add", "Models keep their table names singular.", "--kind", "convention",
                   "--path", "src/db/*.py", "--repo", str(repo))
    assert added.returncode == 0, added.stderr
    model = script(tmp_path / "agent.json", [[("recall", {"query": "how are request bodies validated"})],
                                             [READ_USERS], [READ_MODELS], [FIX], [TEST], [FINISH]])
    ran = errand(errand_home, "run", "Make test_calc.py pass", "--repo", str(repo), "--model", model, "-f")
    assert ran.returncode == 0 and "ready for review" in ran.stdout, ran.stdout + ran.stderr
    [task] = errand_json(errand_home, "ls")
    with TaskStore.open(f"sqlite:///{errand_home / 'errand.db'}") as store:
        results = [e.data["content"] for e in store.events(task["id"], kinds=["tool_result"])]
        recalled, read_users, read_models = results[:3]
        surfaced = {e.data["path"]: e.data["ids"] for e in store.events(task["id"], kinds=["memories_surfaced"])}
    # A glob rule is found when the agent asks for it, and opening its files does not repeat it.
    assert "Validate every request body with pydantic models" in recalled and "RFC 9457" in recalled
    assert "project rules" not in read_users
    assert "Models keep their table names singular." in read_models and "db.session()" in read_models
    assert set(surfaced) == {"src/db/models.py"}
