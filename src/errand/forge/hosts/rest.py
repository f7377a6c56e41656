"""A forge's REST API over plain httpx, for the forges errand speaks without a vendor SDK
(Gitea, Forgejo, GitLab): the token in a header, rate limits waited out, pages followed.

What is retried, and why it is safe:

* a rate limit (429, or 403 with no requests remaining): the forge did nothing, so any
  method is asked again, when the wait (``Retry-After``, GitLab's ``RateLimit-Reset``,
  ``X-RateLimit-Reset``) is at most ``max_wait`` seconds;
* a connection that never opened: nothing was sent, so any method;
* a 5xx or a connection lost mid-answer: only a read. A POST that failed after the forge
  acted on it (a pull request opened, a comment posted) must not act twice; the caller
  finds out what happened (``find_pull``) and carries on from there.

The token is in one header of this process's own client; it is never in a URL, so an
error (which names the path) cannot carry it.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx

from errand.forge.errors import ForgeError

__all__ = ["RestClient"]

RATE_LIMIT_RETRIES = 3
SERVER_RETRIES = 2
MAX_PAGES = 100  # 5,000 items at 50 a page: a thread longer than that is not an instruction
_SAFE = frozenset({"GET", "HEAD"})
_MIN_WAIT = 0.05
_DEFAULT_WAIT = 60.0
_REFUSED = frozenset({400, 409, 422})  # the forge validated the request and said no


class RestClient:
    """One forge account at ``base_url`` (the REST API's root). ``display`` names the forge in
    errors ("Gitea"); ``hint`` is the command that says what the token lacks."""

    def __init__(self, display: str, base_url: str, auth: Mapping[str, str], *, hint: str, max_wait: float = 60.0,
                 transport: httpx.BaseTransport | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        self.display = display
        self.base_url = base_url.rstrip("/")
        self.hint = hint
        self._max_wait = max_wait
        self._sleep = sleep
        # trust_env off: a proxy variable meant for the sandboxes' egress must not see the token.
        self._client = httpx.Client(base_url=self.base_url, headers={**auth, "User-Agent": "errand",
                                                                     "Accept": "application/json"},
                                    timeout=30.0, transport=transport, trust_env=False)

    def close(self) -> None:
        self._client.close()

    # ------------------------------------------------------------ one request

    def json(self, what: str, method: str, path: str, *, params: Mapping[str, Any] | None = None,
             body: Any = None) -> Any:
        response = self.request(what, method, path, params=params, body=body)
        return response.json() if response.content else None

    def request(self, what: str, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                body: Any = None) -> httpx.Response:
        """The forge's answer to one request, after the safe retries; a ForgeError unless 2xx."""
        limited = server = connect = 0
        while True:
            try:
                response = self._client.request(method, path, params=params, json=body)
            except httpx.ConnectError as error:  # nothing reached the forge: asking again cannot do a thing twice
                connect += 1
                if connect > SERVER_RETRIES:
                    raise self._unreachable(what, error) from None
                self._sleep(0.2 * connect)
                continue
            except httpx.TransportError as error:
                server += 1
                if method not in _SAFE or server > SERVER_RETRIES:
                    raise self._unreachable(what, error, maybe_done=method not in _SAFE) from None
                self._sleep(0.5 * server)
                continue
            if _rate_limited(response):
                wait = _wait(response)
                limited += 1
                if limited > RATE_LIMIT_RETRIES or wait > self._max_wait:
                    raise ForgeError(f"{self.display}'s rate limit stopped {what}: try again in {int(wait)} s",
                                     code="forge_rate_limited", status=response.status_code)
                self._sleep(max(wait, _MIN_WAIT))
                continue
            if response.status_code >= 500 and method in _SAFE and server < SERVER_RETRIES:
                server += 1
                self._sleep(0.5 * server)
                continue
            if response.is_success:
                return response
            raise self._failed(what, response)

    def pages(self, what: str, path: str, params: Mapping[str, Any] | None = None) -> Iterator[Any]:
        """Every item of a paged list: ``Link: rel="next"`` when the forge sends it (Gitea, GitLab),
        else GitLab's ``X-Next-Page``."""
        url: str | None = path
        query: dict[str, Any] | None = dict(params or {})
        read: set[str] = set()
        for _ in range(MAX_PAGES):
            if url is None:
                return
            response = self.request(what, "GET", url, params=query)
            read.add(str(response.request.url))
            yield from self._listed(what, response)
            url, query = _next(response, path, dict(params or {}))
            if url is None:
                return
            # Where the next page really goes, resolved as the request will be: the client sends its
            # token with every request.
            target = self._client.build_request("GET", url, params=query).url
            if _origin(target) != _origin(httpx.URL(self.base_url)):
                raise ForgeError(f"{self.display} gave a next page of {what} on another server "
                                 f"({_origin(target)}, not {_origin(httpx.URL(self.base_url))}); errand does not "
                                 "send the token there", code="forge_refused")
            if str(target) in read:
                raise ForgeError(f"{self.display}'s pages of {what} lead back to one already read",
                                 code="forge_refused")

    def _listed(self, what: str, response: httpx.Response) -> list[Any]:
        """A page's items: a JSON list (no body or null: none); anything else (a proxy's HTML page, an
        object) is an error, not items."""
        if not response.content.strip():
            return []
        try:
            items = response.json()
        except ValueError:
            items = response.text
        if items is None:
            return []
        if not isinstance(items, list):
            raise ForgeError(f"{self.display} answered {what} with something other than a list "
                             f"({response.headers.get('content-type') or 'no content type'}: "
                             f"{_message(response)[:80]!r})", code="forge_refused")
        return items

    # ------------------------------------------------------------ errors

    def _unreachable(self, what: str, error: Exception, *, maybe_done: bool = False) -> ForgeError:
        tail = (": it may or may not have happened; errand looks before it asks again" if maybe_done else "")
        return ForgeError(f"{self.display} at {self.base_url} could not be reached for {what} "
                          f"({type(error).__name__}){tail}", code="forge_unreachable")

    def _failed(self, what: str, response: httpx.Response) -> ForgeError:
        status, message = response.status_code, _message(response)
        if status in (401, 403):
            return ForgeError(f"{self.display} refused {what} ({status} {message}): check the token and its access "
                              f"to the repository (`{self.hint}` says what is missing)", code="forge_auth",
                              status=status)
        if status == 404:
            return ForgeError(f"{self.display} found nothing for {what} (404 {message}): check the repository's "
                              "name and the token's access", code="forge_not_found", status=status)
        if status in _REFUSED:
            return ForgeError(f"{self.display} refused {what} ({status} {message})", code="forge_refused",
                              status=status)
        return ForgeError(f"{self.display} failed {what} ({status} {message})", status=status)


def _rate_limited(response: httpx.Response) -> bool:
    return response.status_code == 429 or (response.status_code == 403 and any(
        response.headers.get(name) == "0" for name in ("ratelimit-remaining", "x-ratelimit-remaining")))


def _wait(response: httpx.Response) -> float:
    """Seconds until the forge takes requests again: ``Retry-After`` (seconds or a date), else the
    reset time (a Unix time: GitLab's ``RateLimit-Reset``, Gitea's proxies' ``X-RateLimit-Reset``)."""
    after = response.headers.get("retry-after")
    if after:
        if after.strip().isdigit():
            return float(after)
        when = email.utils.parsedate_to_datetime(after)
        return max(0.0, when.timestamp() - time.time()) if when is not None else _DEFAULT_WAIT
    for name in ("ratelimit-reset", "x-ratelimit-reset"):
        reset = response.headers.get(name)
        if reset and reset.strip().isdigit():
            return max(0.0, float(reset) - time.time())
    return _DEFAULT_WAIT


def _next(response: httpx.Response, path: str,
          params: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """The next page's URL and query: a next link carries its own query; ``X-Next-Page`` is a page of
    the first request's query (``params``), even after pages that came by links."""
    link = response.links.get("next", {}).get("url")
    if link:
        return link, None
    page = response.headers.get("x-next-page", "").strip()
    if page.isascii() and page.isdigit():
        return path, {**params, "page": int(page)}
    return None, None


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    """Scheme, host and port: where a request goes, and what the token may be sent to."""
    return url.scheme, url.host, url.port


def _message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return " ".join(response.text.split())[:200]
    if not isinstance(data, dict):
        return str(data)[:200]
    message = data.get("message") or data.get("error") or ""
    if isinstance(message, dict):  # GitLab's validation errors: {"field": ["is invalid"]}
        message = "; ".join(f"{key} {' '.join(map(str, value)) if isinstance(value, list) else value}"
                            for key, value in message.items())
    elif isinstance(message, list):
        message = "; ".join(map(str, message))
    return str(message)[:500]
