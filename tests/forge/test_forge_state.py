"""The forge's bookkeeping in its own tables: a database an older errand left, whose rounds,
posted questions and CI fixes were only events in the task's log, keeps working after the
migration; and nothing in the forge reaches into the task store or reads an event's data by key."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from errand import database
from errand.forge.inbound.cifix import Rounds, fix_owed
from errand.forge.links import Link, LinkStore, PostedQuestion, Round
from errand.forge.questions import asked_on, is_the_question
from errand.tasks.service import TaskService
from errand.tasks.store.tasks import TaskStore
from postgres import DATABASES, database_url

SRC = Path(__file__).resolve().parents[2] / "src" / "errand"


@pytest.fixture(params=DATABASES)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return database_url(request, tmp_path)


def _task(task_id: str) -> str:
    return ("INSERT INTO tasks (id, title, instruction, repo, base_ref, attempts, state, created_at, updated_at) "
            f"VALUES ('{task_id}', 't', 'i', '/r', 'HEAD', 1, 'needs_input', 1, 1)")


def _link(task_id: str, *, pull: int | None, branch: str | None, at: int, pushed: str | None = None) -> str:
    return ("INSERT INTO forge_links (task_id, forge, base_url, repo, pull, pull_branch, pushed, created_at) VALUES "
            f"('{task_id}', 'github', 'http://forge.test', 'acme/calc', {pull or 'NULL'}, "
            f"{repr(branch) if branch else 'NULL'}, {repr(pushed) if pushed else 'NULL'}, {at})")


def _event(event_id: int, task_id: str, kind: str, data: dict[str, object]) -> str:
    text = json.dumps(data).replace("'", "''")
    return (f"INSERT INTO events (id, task_id, kind, time, data) VALUES ({event_id}, '{task_id}', '{kind}', "
            f"{event_id}, '{text}')")


def _at_0009(url: str, *statements: str) -> None:
    """The database as errand left it before the forge had its own tables for this."""
    from alembic import command
    from alembic.config import Config

    engine = database.connect(url)
    config = Config()
    config.set_main_option("script_location", str(database.MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0009")
        for statement in statements:
            connection.exec_driver_sql(statement)
    engine.dispose()


def test_an_older_database_keeps_its_rounds_questions_and_ci_fixes(url: str) -> None:
    red = "c" * 40
    _at_0009(url, _task("t-fork"), _task("t-review"), _task("t-fix"),
             _link("t-fork", pull=None, branch=None, at=1),
             _link("t-review", pull=7, branch="errand/x", at=2, pushed=red),
             _link("t-fix", pull=7, branch="errand/x", at=3),
             _event(1, "t-fork", "forge_followup", {"pull": 12, "branch": "someone:fix", "head": "a" * 40,
                                                    "requested_by": "maria", "threads": [], "ci": False,
                                                    "fork": "someone/calc", "push_repo": None, "fork_pull": 12}),
             _event(2, "t-fork", "question", {"text": "Which base?"}),
             _event(3, "t-fork", "forge_question_posted", {"question": 2, "on": 12, "comment": 9001}),
             # An older round of errand's own pull request: its line comments hear back on their threads.
             _event(4, "t-review", "forge_followup", {"pull": 7, "branch": "errand/x", "head": "b" * 40,
                                                      "requested_by": "maria", "threads": [501, 502], "ci": False,
                                                      "push_repo": None}),
             _event(5, "t-review", "forge_checks", {"commit": red, "checks": [
                 {"name": "tests", "state": "failure", "url": None}]}),
             _event(6, "t-review", "forge_ci_fix", {"task_id": "t-fix", "commit": red}),
             _event(7, "t-fix", "forge_followup", {"pull": 7, "branch": "errand/x", "head": red,
                                                   "requested_by": None, "threads": [], "ci": True,
                                                   "push_repo": None}))
    with TaskStore.open(url) as store:  # migrates
        links = LinkStore(store.engine)
        service = TaskService(store, memory=None)
        fork_round = links.round("t-fork")
        assert fork_round == Round("t-fork", 12, "someone:fix", "a" * 40, "maria", (), fork="someone/calc",
                                   fork_pull=12)
        fork = links.get("t-fork")
        assert fork is not None and asked_on(links, fork) == 12
        assert is_the_question(links, fork, 9001) and not is_the_question(links, fork, 9002)
        assert links.posted("t-fork") == PostedQuestion("t-fork", 2, 12, 9001)
        assert service.open_question("t-fork") == (2, "Which base?")
        review = links.round("t-review")
        assert review is not None and review.threads == (501, 502) and not review.ci
        fix_round = links.round("t-fix")
        assert fix_round is not None and fix_round.ci
        assert links.fix_asked("t-review", red) and not links.fix_asked("t-review", "d" * 40)

        class Publisher:  # the shape a CI fix is decided with: one fix per red commit, asked already
            def __init__(self) -> None:
                self.service, self.links, self.forge, self.ci_fix_attempts = service, links, None, 3

            @property
            def token(self) -> str:
                return ""

        review_link = links.get("t-review")
        assert review_link is not None
        publisher: Rounds = Publisher()  # type: ignore[assignment]
        # The fix round is still in progress (not pushed): without the old event's fix, a second would be owed.
        assert fix_owed(publisher, review_link) is False


def test_a_fork_round_is_found_by_the_pull_request_it_was_asked_on(url: str) -> None:
    _at_0009(url)
    with TaskStore.open(url) as store:
        task = store.create_task(title="t", instruction="i", repo="/r")
        links = LinkStore(store.engine)
        links.add(Link(task.id, "github", "http://forge.test", "acme/calc", pull=30, pull_branch="errand/f"))
        links.add_round(Round(task.id, 12, "someone:fix", "a" * 40, fork="someone/calc", fork_pull=12))
        found = links.errand_pull_for("acme/calc", 12)
        assert found is not None and found.task_id == task.id
        assert links.errand_pull_for("acme/calc", 13) is None and links.errand_pull_for("acme/other", 12) is None
        links.ask_fix(task.id, "c" * 40, "t-one")
        links.ask_fix(task.id, "c" * 40, "t-two")  # a second ask for the same commit keeps the first
        assert links.fix_asked(task.id, "c" * 40)


def test_the_forge_reaches_the_tasks_through_the_service_and_reads_no_event_by_key() -> None:
    files = [*sorted((SRC / "forge").glob("*.py")), SRC / "cli" / "forge.py", SRC / "cli" / "worker.py"]
    reaching = [f"{path.name}:{n}" for path in files
                for n, line in enumerate(path.read_text().splitlines(), 1) if "service.store." in line]
    assert reaching == []
    # An event's fields are spelled only where the event is declared (the forge's: timeline.py).
    by_key = re.compile(r"\.data(\.get\(|\[)")
    reading = [f"{path.name}:{n}" for path in files if path.name != "timeline.py"
               for n, line in enumerate(path.read_text().splitlines(), 1) if by_key.search(line)]
    assert reading == []


def test_the_pull_request_body_gets_each_question_with_its_answer(tmp_path: Path) -> None:
    with TaskStore.open(f"sqlite:///{tmp_path / 'errand.db'}") as store:
        service = TaskService(store, memory=None)
        task = store.create_task(title="t", instruction="i", repo="/r")
        for kind, text in [("question", "Which base?"), ("answer_delivered", "main"), ("question", "Tabs?"),
                           ("answer_delivered", "spaces"), ("question", "Unanswered?")]:
            store.append_event(task.id, None, kind, {"text": text})
        assert service.questions_answered(task.id) == [("Which base?", "main"), ("Tabs?", "spaces")]
        assert service.open_question(task.id) is not None and service.open_question(task.id)[1] == "Unanswered?"


def test_the_tables_migrate_down_and_up_again_filled_from_the_log(url: str) -> None:
    import sqlalchemy as sa
    from alembic import command
    from alembic.config import Config

    _at_0009(url, _task("t-1"), _link("t-1", pull=None, branch=None, at=1),
             _event(1, "t-1", "forge_followup", {"pull": 4, "branch": "b", "head": "a" * 40, "fork_pull": 4}))
    engine = database.connect(url)
    config = Config()
    config.set_main_option("script_location", str(database.MIGRATIONS))

    def move(to: str) -> set[str]:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            (command.upgrade if to == "0010" else command.downgrade)(config, to)
        with engine.connect() as connection:
            return {name for name in sa.inspect(connection).get_table_names() if name.startswith("forge_")}

    try:
        assert move("0010") == {"forge_links", "forge_deliveries", "forge_rounds", "forge_questions", "forge_ci_fixes"}
        assert move("0009") == {"forge_links", "forge_deliveries"}
        move("0010")
        found = LinkStore(engine).round("t-1")
        assert found is not None and found.fork_pull == 4 and found.threads == () and not found.ci
    finally:
        engine.dispose()
