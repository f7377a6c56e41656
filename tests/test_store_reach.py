"""Outside :mod:`errand.tasks`, nothing calls into the task store through the service
(``service.store.claim_next(...)``, ``state.service.store.events(...)``): a caller asks the service
by a named method, and the store stays behind it. Handing the store on whole (to an engine, a
health check) is not a reach into it."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src" / "errand"


def reaches(source: str) -> list[int]:
    """The lines of ``source`` that use a member of a service's store (``<…>service.store.<member>``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "store":
            owner = node.value.value
            if (isinstance(owner, ast.Name) and owner.id == "service") or \
                    (isinstance(owner, ast.Attribute) and owner.attr == "service"):
                found.append(node.lineno)
    return sorted(found)


def test_no_module_outside_tasks_reaches_into_the_services_store() -> None:
    reaching = {str(path.relative_to(SOURCE)): lines for path in sorted(SOURCE.rglob("*.py"))
                if path.relative_to(SOURCE).parts[0] != "tasks" and (lines := reaches(path.read_text()))}
    assert reaching == {}, f"use a TaskService method instead: {reaching}"


def test_the_walk_sees_a_reach_and_lets_the_store_be_handed_on() -> None:
    assert reaches("service.store.claim_next('w')\nx = state.service.store.events\n") == [1, 2]
    assert reaches("engine = worker_engine(kind, service.store)\ncheck(state.service.store)\n") == []
