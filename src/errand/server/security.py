"""Who may talk to the server, and from where: the token, the Host check and CSRF.

One ASGI middleware, :class:`Guard`, runs before every route:

* **Host.** A server bound to loopback answers only requests whose ``Host`` is
  a loopback name. A web page on another domain that re-points its name at
  127.0.0.1 (DNS rebinding) is refused, so it cannot read the API from inside
  the browser.
* **Token.** With a token, the API wants ``Authorization: Bearer <token>``; a
  browser logs in once and gets a session cookie (HttpOnly, SameSite=Lax) that
  holds an HMAC of the token, not the token. The cookie authenticates reading
  the API; it authenticates changing it only beside ``X-CSRF-Token`` carrying
  the page's CSRF token (below), which a page of another site cannot read, so
  cannot send — the review page's "Send as follow-up" writes this way. Any other
  API write carries the header, which a browser never adds on its own.
* **Cross-site writes.** A POST, PUT, PATCH or DELETE is refused when the
  browser says it comes from another site (``Sec-Fetch-Site``) or another
  origin (``Origin``). An API POST must be JSON (which no cross-site form can
  send without a CORS preflight this server never grants). A web form carries
  a CSRF token: an HMAC, keyed by a secret of this server process, of a random
  cookie (signed double submit); :func:`check_csrf` checks it.
"""

from __future__ import annotations

import hashlib
import hmac
import http
import json
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import quote, urlsplit

from starlette.requests import Request

from errand.server.config import ServerConfig, is_loopback
from errand.server.errors import CsrfError

__all__ = ["CSRF_COOKIE", "SESSION_COOKIE", "Guard", "Keys", "check_csrf", "csrf_token"]

SESSION_COOKIE = "errand_session"
CSRF_COOKIE = "errand_csrf"
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Paths anyone may fetch: the login page and the files it needs, and the health probes
#: (a kubelet or load balancer carries no token; they say only "ok" or which dependency is down).
OPEN_PREFIXES = ("/login", "/static/", "/favicon.ico", "/healthz", "/readyz")
#: Paths programs read (the API, its schema, Prometheus's scrape): refused with 401, not sent to the login page.
MACHINE_PREFIXES = ("/api/", "/openapi", "/docs", "/metrics")
#: Paths whose requests carry their own proof instead of errand's token: a forge's webhook,
#: signed over its body with the shared secret, which the route checks before anything else.
SIGNED_PATHS = frozenset({"/api/forge/github/webhook", "/api/forge/gitea/webhook", "/api/forge/gitlab/webhook"})

#: Sent with every response: no framing, no sniffing, scripts and styles from this server only.
HEADERS = (
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                 b"frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class Keys:
    """The secrets one server process signs with."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self.csrf_secret = secrets.token_bytes(32)
        self.session = _mac(token.encode(), b"errand-session") if token else None

    def token_matches(self, candidate: str) -> bool:
        return self.token is not None and hmac.compare_digest(candidate.encode(), self.token.encode())

    def csrf_for(self, cookie: str) -> str:
        return _mac(self.csrf_secret, cookie.encode())


def _mac(key: bytes, message: bytes) -> str:
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def csrf_token(request: Request) -> str:
    """The token this page's forms carry (the middleware set or found the cookie it signs)."""
    keys: Keys = request.app.state.keys
    return keys.csrf_for(request.scope["state"]["csrf_cookie"])


def check_csrf(request: Request, given: str | None) -> None:
    keys: Keys = request.app.state.keys
    expected = keys.csrf_for(request.scope["state"]["csrf_cookie"])
    if not given or not hmac.compare_digest(given.encode(), expected.encode()):
        raise CsrfError("this form has expired or did not come from errand's own page: reload the page and "
                        "send it again")


class Guard:
    """ASGI middleware enforcing the rules in this module's docstring."""

    def __init__(self, app: App, config: ServerConfig, keys: Keys) -> None:
        self.app = app
        self.config = config
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}
        cookies = _cookies(headers.get("cookie", ""))
        refusal = self._refusal(scope, headers, cookies)
        if refusal is not None:
            await _respond(send, *refusal)
            return
        csrf_cookie = cookies.get(CSRF_COOKIE)
        fresh = csrf_cookie is None or len(csrf_cookie) != 43
        if fresh:
            csrf_cookie = secrets.token_urlsafe(32)
        scope.setdefault("state", {})["csrf_cookie"] = csrf_cookie
        extra = list(HEADERS)
        if fresh:
            extra.append((b"set-cookie", f"{CSRF_COOKIE}={csrf_cookie}; Path=/; HttpOnly; SameSite=Lax".encode()))

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope, headers: dict[str, str], cookies: dict[str, str]) -> tuple[int, str, str] | None:
        path: str = scope["path"]
        method: str = scope["method"]
        host = headers.get("host", "")
        if self.config.loopback_only and not is_loopback(_hostname(host)):
            return 421, "misdirected_request", (f"this server answers only to its loopback name, not {host!r}; "
                                                "use http://127.0.0.1")
        if method in UNSAFE:
            crossing = _cross_site(headers, host)
            if crossing:
                return 403, "cross_site", crossing
        if method == "POST" and path in SIGNED_PATHS:
            return None
        authorized = self._authorized(headers, cookies, writing=method in UNSAFE and path.startswith("/api/"))
        if not authorized and not path.startswith(OPEN_PREFIXES):
            if method == "GET" and not path.startswith(MACHINE_PREFIXES):
                return 303, "login", "/login?next=" + _quote_next(scope)
            return 401, "unauthorized", ("this server needs its token: send `Authorization: Bearer <token>` "
                                         "(errand --token or ERRAND_TOKEN)")
        if method == "POST" and path.startswith("/api/") and "authorization" not in headers:
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            if media != "application/json":
                return 415, "json_required", "API requests send their body as application/json"
        return None

    def _authorized(self, headers: dict[str, str], cookies: dict[str, str], *, writing: bool) -> bool:
        if self.keys.token is None:
            return True
        scheme, _, credential = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self.keys.token_matches(credential.strip()):
            return True
        session = cookies.get(SESSION_COOKIE, "")
        if self.keys.session is None or not hmac.compare_digest(session.encode(), self.keys.session.encode()):
            return False
        return not writing or self._page_token(headers, cookies)

    def _page_token(self, headers: dict[str, str], cookies: dict[str, str]) -> bool:
        """Whether the request carries the CSRF token errand's own page was given (signed double submit)."""
        given, cookie = headers.get("x-csrf-token", ""), cookies.get(CSRF_COOKIE, "")
        return bool(given and cookie) and hmac.compare_digest(given.encode(), self.keys.csrf_for(cookie).encode())


def _cross_site(headers: dict[str, str], host: str) -> str | None:
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"a {site} request may not change anything here"
    origin = headers.get("origin")
    if origin is not None and origin != "null" and urlsplit(origin).netloc.lower() != host.lower():
        return f"a request from {origin} may not change anything here"
    if origin == "null":
        return "a request from an opaque origin may not change anything here"
    return None


def _hostname(host: str) -> str:
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _cookies(header: str) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except Exception:  # noqa: BLE001 - a malformed cookie header counts as no cookies
        return {}
    return {key: morsel.value for key, morsel in jar.items()}


def _quote_next(scope: Scope) -> str:
    query = scope.get("query_string", b"").decode("latin-1")
    return quote(scope["path"] + (f"?{query}" if query else ""), safe="")


async def _respond(send: Send, status: int, code: str, detail: str) -> None:
    if status == 303:
        headers = [(b"location", detail.encode()), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 303, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return
    body = json.dumps({"type": "about:blank", "title": http.HTTPStatus(status).phrase, "status": status,
                       "detail": detail, "code": code}).encode()
    headers = [(b"content-type", b"application/problem+json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
