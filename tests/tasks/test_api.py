"""The service and the HTTP client answer one task API: same methods, same parameters."""

from __future__ import annotations

import inspect

from errand.server.client import ErrandClient
from errand.tasks.api import TaskApi
from errand.tasks.service import TaskService


def _methods(kind: type) -> dict[str, list[str]]:
    return {name: list(inspect.signature(member).parameters)
            for name, member in inspect.getmembers(kind, inspect.isfunction) if not name.startswith("_")}


def test_the_service_and_the_client_offer_every_method_of_the_protocol_alike() -> None:
    wanted = _methods(TaskApi)
    assert len(wanted) >= 18
    for kind in (TaskService, ErrandClient):
        offered = _methods(kind)
        assert {name: offered.get(name, [])[:len(params)] for name, params in wanted.items()} == wanted, kind
