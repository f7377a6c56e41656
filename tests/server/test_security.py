"""Who may do what: the token beyond loopback, the Host check, CSRF on forms, no cross-site
writes, and no way out of the server's own files through any path."""

from __future__ import annotations

import http.client
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

import forkserver
from errand.errors import ConfigError
from errand.server.config import ServerConfig

from .conftest import Served

TOKEN = "a-test-token-long-enough-1234"


def raw_get(served: Served, path: str, host: str | None = None) -> tuple[int, str]:
    """A request with its path exactly as given (no client normalises the dots away)."""
    address = served.url.removeprefix("http://")
    connection = http.client.HTTPConnection(address, timeout=30)
    connection.putrequest("GET", path, skip_host=True)
    connection.putheader("Host", host or address)
    connection.endheaders()
    response = connection.getresponse()
    body = response.read().decode(errors="replace")
    connection.close()
    return response.status, body


def csrf_of(page: httpx.Response) -> str:
    match = re.search(r'name="csrf_token" value="([0-9a-f]+)"', page.text)
    assert match, page.text[:500]
    return match.group(1)


def test_beyond_loopback_a_token_is_required() -> None:
    with pytest.raises(ConfigError) as refused:
        ServerConfig(host="0.0.0.0")
    assert refused.value.code == "token_required"
    assert ServerConfig(host="::1").loopback_only and not ServerConfig(host="0.0.0.0", token=TOKEN).loopback_only
    ran = forkserver.run(["serve", "--host", "0.0.0.0"], timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert ran.returncode == 2 and "set a token with --token or ERRAND_TOKEN" in ran.stderr


def test_without_the_token_nothing_is_served(serve: Callable[..., Served]) -> None:
    served = serve("--no-engine", host="0.0.0.0", token=TOKEN)
    with served.client() as anonymous, served.client(TOKEN) as owner, served.client("wrong-token-xxxxxxxx") as wrong:
        for client in (anonymous, wrong):
            for method, path in (("GET", "/api/tasks"), ("GET", "/openapi.json"), ("GET", "/api/sandboxes"),
                                 ("POST", "/api/tasks"), ("DELETE", "/api/sandboxes/sb-aaaaaaaaaa")):
                response = client.request(method, path, json={})
                assert response.status_code == 401, (method, path)
                assert response.headers["content-type"] == "application/problem+json"
                assert response.json()["code"] == "unauthorized"
        assert owner.get("/api/tasks").status_code == 200
        assert anonymous.get("/").status_code == 303 and anonymous.get("/").headers["location"] == "/login?next=%2F"
        assert anonymous.get("/tasks/t-1/live").status_code == 303

        login = anonymous.get("/login")
        assert login.status_code == 200
        denied = anonymous.post("/login", data={"csrf_token": csrf_of(login), "token": "nope", "next": "/"})
        assert denied.status_code == 401
        entered = anonymous.post("/login", data={"csrf_token": csrf_of(login), "token": TOKEN, "next": "//evil"})
        assert entered.status_code == 303 and entered.headers["location"] == "/"  # no open redirect
        assert anonymous.get("/").status_code == 200 and anonymous.get("/api/tasks").status_code == 200
        # The session cookie reads; it never writes through the API (only the header does).
        assert anonymous.post("/api/tasks", json={}).status_code == 401


def test_cross_site_requests_change_nothing(serve: Callable[..., Served], repo: Path) -> None:
    served = serve("--no-engine")
    with served.client() as client:
        task = client.post("/api/tasks", json={"instruction": "x", "repo": str(repo), "model": "openai:m"}).json()
        assert raw_get(served, "/api/tasks", host="rebound.example:80")[0] == 421  # DNS rebinding
        form_post = client.post(f"/api/tasks/{task['id']}/cancel", content=b"a=b",
                                headers={"content-type": "application/x-www-form-urlencoded"})
        assert form_post.status_code == 415
        for headers in ({"origin": "http://evil.example"}, {"sec-fetch-site": "cross-site"}, {"origin": "null"}):
            refused = client.post(f"/api/tasks/{task['id']}/cancel", json={}, headers=headers)
            assert refused.status_code == 403 and refused.json()["code"] == "cross_site"

        page = client.get(f"/tasks/{task['id']}")
        assert "content-security-policy" in page.headers and page.headers["x-content-type-options"] == "nosniff"
        no_token = client.post(f"/tasks/{task['id']}/cancel", data={"csrf_token": ""})
        assert no_token.status_code == 422  # the field is required
        forged = client.post(f"/tasks/{task['id']}/cancel", data={"csrf_token": "0" * 64})
        assert forged.status_code == 403 and "expired" in forged.text
        with served.client() as stranger:  # another browser: its own cookie, so our token is worthless to it
            stolen = stranger.post(f"/tasks/{task['id']}/cancel", data={"csrf_token": csrf_of(page)})
            assert stolen.status_code == 403
        assert client.get(f"/api/tasks/{task['id']}").json()["state"] == "queued"
        asked = client.post(f"/tasks/{task['id']}/cancel", data={"csrf_token": csrf_of(page)})
        assert asked.status_code == 200 and f"Cancel task {task['id']}?" in asked.text  # its confirm step
        assert client.get(f"/api/tasks/{task['id']}").json()["state"] == "queued"
        done = client.post(f"/tasks/{task['id']}/cancel", data={"csrf_token": csrf_of(page), "confirm": "yes"})
        assert done.status_code == 303
        assert client.get(f"/api/tasks/{task['id']}").json()["state"] == "cancelled"


def test_no_path_leads_out_of_the_server(serve: Callable[..., Served], repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    served = serve("--no-engine", "--repo-root", str(repo))
    for path in ("/static/../../../../../../etc/passwd", "/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                 "/static/..%2f..%2f..%2f..%2fetc%2fpasswd", "/api/sandboxes/..%2f..%2f..%2fetc%2fpasswd/egress",
                 "/api/sandboxes/../../../etc/passwd/egress", "/api/tasks/..%2f..%2f..%2fetc%2fpasswd/diff",
                 "/tasks/%2e%2e%2f%2e%2e%2fetc%2fpasswd/review", "/assets/../../../etc/passwd",
                 "/static/%2fetc%2fpasswd", "//etc/passwd"):
        status, body = raw_get(served, path)
        assert status in (400, 404, 405, 422), (path, status)
        assert "root:" not in body, path
    with served.client() as client:
        for repo_path in ("/etc", str(outside), f"{repo}/../outside"):
            refused = client.post("/api/tasks", json={"instruction": "x", "repo": repo_path, "model": "openai:m"})
            assert refused.status_code == 422 and refused.json()["code"] == "repo_not_allowed", repo_path
        scripted = client.post("/api/tasks", json={"instruction": "x", "repo": str(repo),
                                                   "model": "scripted:/etc/passwd"})
        assert scripted.status_code == 422 and scripted.json()["code"] == "model_not_allowed"
        task = client.post("/api/tasks", json={"instruction": "x", "repo": str(repo), "model": "openai:m"}).json()
        into = client.post(f"/api/tasks/{task['id']}/accept", json={"into": str(outside)})
        assert into.status_code == 422 and into.json()["code"] == "repo_not_allowed"
        assert client.get("/api/tasks").json()["tasks"] == [task]


def test_a_logged_in_page_writes_the_api_only_with_its_csrf_token(serve: Callable[..., Served], repo: Path) -> None:
    """The review page sends its follow-up as JSON to the API: with the session cookie alone that is
    refused, as before; with the page's CSRF token beside it (which another site cannot read) it is done."""
    served = serve("--no-engine", host="0.0.0.0", token=TOKEN)
    with served.client(TOKEN) as owner, served.client() as browser, served.client() as stranger:
        task = owner.post("/api/tasks", json={"instruction": "x", "repo": str(repo), "model": "openai:m"}).json()
        login = browser.get("/login")
        entered = browser.post("/login", data={"csrf_token": csrf_of(login), "token": TOKEN, "next": "/"})
        assert entered.status_code == 303
        token = csrf_of(browser.get(f"/tasks/{task['id']}"))
        cancel = f"/api/tasks/{task['id']}/cancel"
        assert browser.post(cancel, json={}).status_code == 401
        assert browser.post(cancel, json={}, headers={"x-csrf-token": "0" * 64}).status_code == 401
        stranger.get("/login")  # a cookie of its own: the token signs another browser's cookie, not this one's
        stranger.cookies.set("errand_session", browser.cookies["errand_session"])
        assert stranger.post(cancel, json={}, headers={"x-csrf-token": token}).status_code == 401
        assert owner.get(f"/api/tasks/{task['id']}").json()["state"] == "queued"
        done = browser.post(cancel, json={}, headers={"x-csrf-token": token})
        assert done.status_code == 200, done.text
        assert owner.get(f"/api/tasks/{task['id']}").json()["state"] == "cancelled"
