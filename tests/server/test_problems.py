"""Every error of the application as ``application/problem+json`` (RFC 9457): errand's own with their
code and fields, a request that does not validate, an HTTP error, and anything unexpected as a 500
that says nothing of the internals; a browser asking for a page gets the page drawn instead."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.testclient import TestClient
from starlette.exceptions import HTTPException

from errand.errors import ConfigError
from errand.server.problems import PROBLEM_JSON, install, problem
from errand.tasks.errors import WrongState


def application(*, html: bool = False) -> FastAPI:
    app = FastAPI()

    def page(request: Request, status: int, detail: str) -> Response:
        return HTMLResponse(f"<h1>{status}</h1><p>{detail}</p>", status_code=status)

    install(app, html=page if html else None)

    @app.get("/api/config")
    def config_error() -> None:
        raise ConfigError("the port is taken", code="port_taken")

    @app.get("/api/tasks/{task_id}")
    def wrong_state(task_id: str) -> None:
        raise WrongState(f"task {task_id} is running", task_id=task_id, state="running")

    @app.get("/api/count")
    def count(n: int) -> int:
        return n

    @app.get("/api/teapot")
    def teapot() -> None:
        raise HTTPException(418, "short and stout")

    @app.get("/api/crash")
    def crash() -> None:
        raise RuntimeError("secret internals at /srv/errand/db")

    @app.get("/tasks/{task_id}")
    def a_page(task_id: str) -> None:
        raise WrongState(f"task {task_id} is running", task_id=task_id, state="running")

    return app


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(application(), raise_server_exceptions=False) as client:
        yield client


def test_an_errand_error_is_a_problem_with_its_code_and_fields(client: TestClient) -> None:
    response = client.get("/api/tasks/t-1")
    assert response.headers["content-type"] == PROBLEM_JSON
    body = response.json()
    assert body["status"] == response.status_code == 409
    assert (body["code"], body["detail"], body["task_id"], body["title"]) == (
        "wrong_state", "task t-1 is running", "t-1", "Conflict")
    assert client.get("/api/config").json()["code"] == "port_taken"


def test_a_request_that_does_not_validate_names_what_is_wrong(client: TestClient) -> None:
    response = client.get("/api/count", params={"n": "many"})
    body = response.json()
    assert response.status_code == 422 and body["code"] == "invalid_request"
    assert body["errors"][0]["loc"] == ["query", "n"] and body["detail"].startswith("query.n: ")


def test_an_http_error_keeps_its_status_and_gets_a_code(client: TestClient) -> None:
    body = client.get("/api/teapot").json()
    assert (body["status"], body["code"], body["detail"]) == (418, "i'm_a_teapot", "short and stout")
    missing = client.get("/api/nothing-here")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"


def test_the_unexpected_is_a_500_that_tells_nothing_of_the_internals(client: TestClient,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="errand.server"):
        response = client.get("/api/crash")
    assert response.status_code == 500 and response.json()["code"] == "internal_error"
    assert "secret internals" not in response.text
    assert "GET /api/crash failed" in caplog.text  # the log has it


def test_a_401_asks_for_the_bearer_token() -> None:
    assert problem(401, "log in", "unauthorized").headers["WWW-Authenticate"] == "Bearer"
    assert "WWW-Authenticate" not in problem(403, "no", "forbidden").headers


def test_a_browser_asking_for_a_page_gets_the_page_and_the_api_stays_json() -> None:
    with TestClient(application(html=True), raise_server_exceptions=False) as client:
        page = client.get("/tasks/t-2", headers={"accept": "text/html,*/*"})
        assert page.status_code == 409 and page.text == "<h1>409</h1><p>task t-2 is running</p>"
        api = client.get("/api/tasks/t-2", headers={"accept": "text/html,*/*"})
        assert api.headers["content-type"] == PROBLEM_JSON
        script = client.get("/tasks/t-2", headers={"accept": "application/json"})
        assert script.headers["content-type"] == PROBLEM_JSON
