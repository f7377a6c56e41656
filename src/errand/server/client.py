"""A client of errand's HTTP API with the shape of :class:`~errand.tasks.service.TaskService`.

The CLI talks to a remote server (``--server URL`` / ``ERRAND_SERVER``) through
this client exactly as it talks to the local store through the service: the
same method names, the same records back (:class:`Task`, :class:`Run`,
:class:`Event`, ...), and the same errors, rebuilt from the server's problem
documents by their ``code``. Reading goes through ``client.store``, like
``service.store``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import quote

import httpx

from errand.errors import ErrandError
from errand.models import ModelEndpoint
from errand.repo.workcopy import is_url
from errand.server.codes import error_from
from errand.server.errors import ServerError
from errand.tasks.comments import LineComment
from errand.tasks.lifecycle import TaskState
from errand.tasks.records import Event, Review, Run, RunState, Task, Verdict
from errand.tasks.service import Accepted
from errand.tasks.store.reading import StoreReads

if TYPE_CHECKING:
    from errand.tasks.api import TaskApi
    from errand.tasks.service import TaskService

__all__ = ["ErrandClient", "RemoteStore", "ServerError"]

RECONNECT_DELAY = 1.0


class _Http:
    def __init__(self, base_url: str, token: str | None, timeout: float) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self.http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        if method == "POST" and "json" not in options:
            options["json"] = {}
        try:
            response = self.http.request(method, path, **options)
        except httpx.HTTPError as error:
            raise ServerError(f"cannot reach the errand server at {self.base_url}: {error}",
                              code="server_unreachable") from None
        if response.is_error:
            raise _error(response)
        return response

    def json(self, method: str, path: str, **options: Any) -> Any:
        return self.request(method, path, **options).json()


def _error(response: httpx.Response) -> ErrandError:
    """The errand error a problem document describes (:mod:`errand.server.codes` has the table)."""
    try:
        problem = response.json()
        if not isinstance(problem, dict) or "detail" not in problem:
            raise ValueError(problem)
    except ValueError:
        return ServerError(f"the server answered {response.status_code}: {response.text[:200]}")
    return error_from(response.status_code, problem)


def _task(data: dict[str, Any]) -> Task:
    fields = {name: data[name] for name in Task.__dataclass_fields__}
    endpoint = fields["model_endpoint"]
    return Task(**{**fields, "state": TaskState(data["state"]),
                   "model_endpoint": ModelEndpoint.from_json(endpoint) if endpoint is not None else None})


def _run(data: dict[str, Any]) -> Run:
    return Run(**{**data, "state": RunState(data["state"])})


def _review(data: dict[str, Any]) -> Review:
    return Review(**{**data, "verdict": Verdict(data["verdict"])})


class RemoteStore:
    """The reading half of :class:`~errand.tasks.store.tasks.TaskStore`, over HTTP."""

    def __init__(self, http: _Http) -> None:
        self._http = http

    def list_tasks(self, *, state: TaskState | str | None = None, repo: str | None = None, limit: int = 50,
                   before: str | None = None) -> list[Task]:
        params = {key: str(value) for key, value in (("state", state), ("repo", repo), ("before", before))
                  if value is not None}
        tasks: list[Task] = []
        while len(tasks) < limit:  # the server pages at most 200 at a time
            page = self._http.json("GET", "/api/tasks", params={**params, "limit": min(200, limit - len(tasks))})
            tasks += [_task(t) for t in page["tasks"]]
            if page["next"] is None:
                break
            params["before"] = page["next"]
        return tasks

    def get_task(self, task_id: str) -> Task:
        return _task(self._detail(task_id))

    def runs(self, task_id: str) -> list[Run]:
        return [_run(r) for r in self._detail(task_id)["runs"]]

    def reviews(self, task_id: str) -> list[Review]:
        return [_review(r) for r in self._detail(task_id)["reviews"]]

    def events(self, task_id: str, after_id: int = 0, limit: int = 1000, *,
               kinds: Collection[str] | None = None) -> list[Event]:
        events: list[Event] = []
        while len(events) < limit:
            params: dict[str, Any] = {"after": after_id, "limit": min(5000, limit - len(events))}
            if kinds is not None:
                params["kind"] = list(kinds)
            page = [Event(**e) for e in self._http.json("GET", f"/api/tasks/{_id(task_id)}/events", params=params)]
            events += page
            if len(page) < params["limit"]:
                break
            after_id = page[-1].id
        return events

    def _detail(self, task_id: str) -> dict[str, Any]:
        detail: dict[str, Any] = self._http.json("GET", f"/api/tasks/{_id(task_id)}")
        return detail


def _id(task_id: str) -> str:
    return quote(task_id, safe="") or "_"


class ErrandClient(StoreReads[RemoteStore]):
    """TaskService's methods against a server at ``base_url``."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 60.0) -> None:
        self._http = _Http(base_url, token, timeout)
        self.store = RemoteStore(self._http)

    def close(self) -> None:
        self._http.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ intake, steering, review

    def submit(self, instruction: str, *, repo: str | Path, base: str = "HEAD", model: str | None = None,
               attempts: int = 1, title: str | None = None, agent: str | None = None) -> Task:
        source = str(repo)
        if not is_url(source) and Path(source).expanduser().exists():
            source = str(Path(source).expanduser().resolve())  # a path means this machine's, as the CLI's does
        body = {"instruction": instruction, "repo": source, "base": base, "model": model, "attempts": attempts,
                "title": title, "agent": agent}
        return _task(self._http.json("POST", "/api/tasks", json=body))

    def message(self, task_id: str, text: str) -> int:
        return int(self._post(task_id, "message", {"text": text})["event_id"])

    def answer(self, task_id: str, text: str) -> int:
        return int(self._post(task_id, "answer", {"text": text})["event_id"])

    def cancel(self, task_id: str) -> Task:
        return _task(self._post(task_id, "cancel", {}))

    def followup(self, task_id: str, text: str = "", comments: Sequence[LineComment] = (), *,
                 attempt: int | None = None) -> Review | Task:
        sent = [{"path": c.path, "side": c.side, "start_line": c.start_line, "end_line": c.end_line,
                 "body": c.body} for c in comments]
        body: dict[str, Any] = {"text": text, "comments": sent} if sent else {"text": text}
        if attempt is not None:
            body["attempt"] = attempt
        answer = self._post(task_id, "followup", body)
        return _review(answer) if "verdict" in answer else _task(answer)

    def retry(self, task_id: str) -> Task:
        return _task(self._post(task_id, "retry", {}))

    def reject(self, task_id: str, reason: str) -> Review:
        return _review(self._post(task_id, "reject", {"reason": reason}))

    def accept(self, task_id: str, *, attempt: int | None = None, into: str | Path | None = None,
               confirm: bool = False) -> Accepted:
        body = {"attempt": attempt, "into": str(Path(into).expanduser().resolve()) if into is not None else None,
                "confirm": confirm}
        return Accepted(**self._post(task_id, "accept", body))

    def _post(self, task_id: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = self._http.json("POST", f"/api/tasks/{_id(task_id)}/{action}", json=body)
        return answer

    def chosen_run(self, task_id: str, attempt: int | None = None) -> Run:
        """The run a review is about, its patch included (as the service returns it)."""
        params = {"attempt": attempt} if attempt is not None else {}
        chosen = self._http.json("GET", f"/api/tasks/{_id(task_id)}/evidence", params=params)
        patch = self._http.request("GET", f"/api/tasks/{_id(task_id)}/diff", params=params).text
        run = chosen["run"]
        return _run({**run, "result": {**(run["result"] or {}), "patch": patch}})

    def round_runs(self, task_id: str) -> list[Run]:
        return [_run(a["run"]) for a in self._http.json("GET", f"/api/tasks/{_id(task_id)}/attempts")]

    def progress(self, task_id: str) -> dict[str, Any]:
        figures: dict[str, Any] = self._http.json("GET", f"/api/tasks/{_id(task_id)}")["progress"]
        return figures

    def follow(self, task_id: str, *, settled: Collection[TaskState], after: int = 0) -> Iterator[Event]:
        """The task's events from ``after`` on, live, until the task is in a ``settled`` state;
        a dropped connection is resumed from the last event seen."""
        if self.store.get_task(task_id).state in settled:
            yield from self.store.events(task_id, after, 1_000_000)
            return
        last = after
        while True:
            try:
                for event in self._stream(task_id, last):
                    last = event.id
                    yield event
                    if event.kind in _SETTLING and self.store.get_task(task_id).state in settled:
                        return
            except (httpx.TransportError, httpx.RemoteProtocolError):
                time.sleep(RECONNECT_DELAY)

    def _stream(self, task_id: str, last: int) -> Iterator[Event]:
        headers = {"Accept": "text/event-stream", "Last-Event-ID": str(last)}
        with self._http.http.stream("GET", f"/api/tasks/{_id(task_id)}/events/stream", headers=headers) as response:
            if response.is_error:
                response.read()
                raise _error(response)
            yield from parse_sse(response.iter_lines(), lambda data: Event(**_loads(data)))


_SETTLING = frozenset({"ready_for_review", "answered", "failed", "cancelled", "accepted", "rejected"})


def _loads(data: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(data)
    return loaded


def parse_sse(lines: Iterator[str], decode: Callable[[str], Event]) -> Iterator[Event]:
    """Events from the lines of a server-sent event stream (comments and retry lines skipped)."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield decode("\n".join(data))
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


if TYPE_CHECKING:
    def _both_answer_the_task_api(client: ErrandClient, service: TaskService) -> tuple[TaskApi, TaskApi]:
        return client, service  # mypy holds the client and the service to the same protocol
