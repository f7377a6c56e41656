"""A forge's REST API over plain httpx, against a loopback server scripted to have a bad day:
the token only in a header, pages followed, rate limits waited out or refused by their wait,
reads retried after a server error and writes never, and each failure a clear code."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from errand.forge import ForgeError
from errand.forge.hosts.rest import RestClient

TOKEN = "glpat-restTokenThatMustNeverLeak"
DROP = "drop"  # a scripted answer: close the connection without one


@dataclass
class Scripted:
    """A loopback forge that answers each request with the next scripted (status, headers, body)."""

    answers: list[Any] = field(default_factory=list)
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                scripted.seen.append((self.command, self.path, dict(self.headers)))
                answer = scripted.answers.pop(0) if scripted.answers else (200, {}, [])
                if answer == DROP:
                    self.close_connection = True
                    return
                status, headers, body = answer
                data = json.dumps(body).encode() if not isinstance(body, bytes) else body
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/v4"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def forge() -> Iterator[Scripted]:
    scripted = Scripted()
    try:
        yield scripted
    finally:
        scripted.stop()


def client(forge: Scripted, waits: list[float], max_wait: float = 60.0) -> RestClient:
    return RestClient("GitLab", forge.url, {"PRIVATE-TOKEN": TOKEN}, hint="errand forge connect gitlab",
                      max_wait=max_wait, sleep=waits.append)


def test_the_token_goes_in_its_header_only_and_pages_are_followed(forge: Scripted) -> None:
    # Gitea's and GitLab's Link header, whose next link carries its own query; else GitLab's X-Next-Page.
    forge.answers = [(200, {"Link": f'<{forge.url}/items?cursor=b&per_page=2>; rel="next"'}, [1, 2]),
                     (200, {"Link": f'<{forge.url}/items?cursor=a>; rel="prev"'}, [3]),
                     (200, {"X-Next-Page": "2"}, [4]), (200, {"X-Next-Page": ""}, [5])]
    rest = client(forge, [])
    assert list(rest.pages("reading items", "/items", {"per_page": 2})) == [1, 2, 3]
    assert list(rest.pages("reading notes", "/notes", {"per_page": 1})) == [4, 5]
    paths = [path for _, path, _ in forge.seen]
    assert paths == ["/api/v4/items?per_page=2", "/api/v4/items?cursor=b&per_page=2", "/api/v4/notes?per_page=1",
                     "/api/v4/notes?per_page=1&page=2"]
    assert all(headers["PRIVATE-TOKEN"] == TOKEN and headers["User-Agent"] == "errand" for _, _, headers in forge.seen)
    assert all(TOKEN not in path for path in paths)
    rest.close()


def test_a_page_by_number_after_a_page_by_link_keeps_the_first_requests_query(forge: Scripted) -> None:
    """A proxy or a forge version that sends a Link on one page and only X-Next-Page on the next: the
    numbered page is of the query asked for (the state filter, the page size), not of none."""
    forge.answers = [(200, {"Link": f'<{forge.url}/issues?page=2&per_page=1&state=opened>; rel="next"'}, [1]),
                     (200, {"X-Next-Page": "3"}, [2]), (200, {}, [3])]
    rest = client(forge, [])
    assert list(rest.pages("reading issues", "/issues", {"per_page": 1, "state": "opened"})) == [1, 2, 3]
    assert [path for _, path, _ in forge.seen][-1] == "/api/v4/issues?per_page=1&state=opened&page=3"
    rest.close()


def test_a_next_page_on_another_server_is_not_asked_with_the_token(forge: Scripted) -> None:
    """The token goes with every request the client makes: a Link to another server (or another
    scheme or port of this one) ends the listing with an error instead (a red team's find: it was
    followed, and the other server got the token)."""
    elsewhere = Scripted()
    try:
        for link in (f"{elsewhere.url}/steal?page=2", forge.url.replace("http://", "https://") + "/items?page=2"):
            forge.answers = [(200, {"Link": f'<{link}>; rel="next"'}, [1])]
            with pytest.raises(ForgeError) as refused:
                list(client(forge, []).pages("reading items", "/items"))
            assert refused.value.code == "forge_refused" and "on another server" in str(refused.value)
            assert "does not send the token there" in str(refused.value)
        assert elsewhere.seen == []
    finally:
        elsewhere.stop()


def test_pages_that_lead_back_end_the_listing_with_an_error(forge: Scripted) -> None:
    forge.answers = [(200, {"X-Next-Page": "2"}, [1]), (200, {"X-Next-Page": "2"}, [2])]
    with pytest.raises(ForgeError) as looped:
        list(client(forge, []).pages("reading notes", "/notes"))
    assert "lead back to one already read" in str(looped.value) and len(forge.seen) == 2
    forge.answers = [(200, {"X-Next-Page": "²"}, [1])]  # a digit to str.isdigit, not a page number
    assert list(client(forge, []).pages("reading notes", "/notes")) == [1]


def test_a_page_that_is_not_a_json_list_is_an_error_not_items(forge: Scripted) -> None:
    """A proxy's HTML page raised a bare JSONDecodeError; an object was read as its keys (a red team's finds)."""
    for headers, body in (({"Content-Type": "text/html"}, b"<html>sign in</html>"), ({}, {"message": "moved"})):
        forge.answers = [(200, headers, body)]
        with pytest.raises(ForgeError) as refused:
            list(client(forge, []).pages("reading notes", "/notes"))
        assert refused.value.code == "forge_refused" and "something other than a list" in str(refused.value)
    forge.answers = [(200, {}, None)]
    assert list(client(forge, []).pages("reading notes", "/notes")) == []


def test_a_short_rate_limit_is_waited_out_and_a_long_one_is_refused_by_its_wait(forge: Scripted) -> None:
    waits: list[float] = []
    forge.answers = [(429, {"Retry-After": "2"}, {}), (403, {"RateLimit-Remaining": "0", "Retry-After": "1"}, {}),
                     (201, {}, {"id": 7})]
    assert client(forge, waits).json("posting a comment", "POST", "/notes", body={"body": "hi"}) == {"id": 7}
    assert waits == [2.0, 1.0] and len(forge.seen) == 3  # the forge did nothing: even a POST is asked again
    forge.answers = [(429, {"Retry-After": "600"}, {})]
    waits.clear()
    with pytest.raises(ForgeError) as caught:
        client(forge, waits).json("reading an issue", "GET", "/issues/1")
    assert caught.value.code == "forge_rate_limited" and "try again in 600 s" in str(caught.value)
    assert waits == [] and len(forge.seen) == 4


def test_a_read_is_retried_after_a_server_error_and_a_write_is_not(forge: Scripted) -> None:
    forge.answers = [(502, {}, {}), (503, {}, {}), (200, {}, {"ok": True})]
    waits: list[float] = []
    assert client(forge, waits).json("reading an issue", "GET", "/issues/1") == {"ok": True}
    assert waits == [0.5, 1.0]
    forge.answers = [(502, {}, {"message": "bad gateway"})]
    with pytest.raises(ForgeError) as caught:
        client(forge, []).json("opening a merge request", "POST", "/merge_requests", body={})
    assert caught.value.status == 502 and "failed opening a merge request (502 bad gateway)" in str(caught.value)
    assert len(forge.seen) == 4


def test_a_write_whose_answer_was_lost_may_have_happened_and_is_not_sent_again(forge: Scripted) -> None:
    forge.answers = [DROP]
    with pytest.raises(ForgeError) as caught:
        client(forge, []).json("posting a comment", "POST", "/notes", body={"body": "hi"})
    assert caught.value.code == "forge_unreachable" and "it may or may not have happened" in str(caught.value)
    assert len(forge.seen) == 1
    forge.answers = [DROP, (200, {}, [])]
    assert client(forge, []).json("reading notes", "GET", "/notes") == []  # a read is asked again


@pytest.mark.parametrize(("status", "body", "code", "says"), [
    (401, {"message": "401 Unauthorized"}, "forge_auth", "`errand forge connect gitlab` says what is missing"),
    (403, {"message": "403 Forbidden"}, "forge_auth", "check the token"),
    (404, {"message": "404 Project Not Found"}, "forge_not_found", "check the repository's name"),
    (422, {"message": {"title": ["is too long"], "branch": "exists"}}, "forge_refused",
     "title is too long; branch exists"),
    (409, {"error": ["conflict", "again"]}, "forge_refused", "(409 conflict; again)"),
    (400, b"<html>  bad\n request </html>", "forge_refused", "(400 <html> bad request </html>)"),
])
def test_each_failure_has_its_code_and_the_forges_own_words(forge: Scripted, status: int, body: Any, code: str,
                                                            says: str) -> None:
    forge.answers = [(status, {}, body)]
    with pytest.raises(ForgeError) as caught:
        client(forge, []).json("opening a merge request", "POST", "/merge_requests", body={})
    assert (caught.value.code, caught.value.status) == (code, status)
    assert says in str(caught.value) and TOKEN not in str(caught.value)


def test_an_unreachable_forge_is_asked_again_then_a_clear_error() -> None:
    waits: list[float] = []
    rest = RestClient("Gitea", "http://127.0.0.1:9/api/v1", {"Authorization": f"token {TOKEN}"}, hint="h",
                      sleep=waits.append)
    with pytest.raises(ForgeError) as caught:
        rest.json("posting a comment", "POST", "/comments", body={})
    assert caught.value.code == "forge_unreachable" and "Gitea at http://127.0.0.1:9/api/v1" in str(caught.value)
    assert waits == [0.2, 0.4]  # nothing was sent: even a POST is asked again
    assert "may or may not" not in str(caught.value)
