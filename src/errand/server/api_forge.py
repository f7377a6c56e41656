"""The forge's face on ``errand serve``: GitHub's webhook, and the loop that catches up.

``POST /api/forge/github/webhook`` is authenticated by the delivery's HMAC signature
over the raw body, not by errand's bearer token (GitHub cannot send one); the guard
lets that one path through to here, and nothing happens before the signature holds.
While the server runs, accepted tasks from the forge get their pull requests and
review rounds are pushed, every ``ERRAND_FORGE_SYNC`` seconds (default 5), so an
accept in the web page ends on the forge as one from ``errand accept`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse

from errand.errors import ErrandError
from errand.forge import ForgeError, open_github
from errand.forge.links import LinkStore
from errand.forge.publish import Publisher, catch_up
from errand.forge.webhooks import WebhookHandler, verify_signature
from errand.server.problems import problem
from errand.tasks.service import TaskService

__all__ = ["WEBHOOK_PATH", "router"]

log = logging.getLogger("errand.server.forge")
WEBHOOK_PATH = "/api/forge/github/webhook"
MAX_BODY = 25 * 1024 * 1024  # GitHub caps a delivery's payload at 25 MB


@dataclass(frozen=True)
class _Forge:
    handler: WebhookHandler
    publisher: Publisher
    secret: str | None


def _open(app: FastAPI) -> _Forge | None:
    """The forge from ``forge.toml`` and the environment, or None when no token is set."""
    service: TaskService = app.state.service
    try:
        forge, settings, token = open_github()
    except ForgeError as error:
        log.info("no forge: %s", error.message)
        return None
    links = LinkStore(service.store.engine)
    public = os.environ.get("ERRAND_PUBLIC_URL") or None
    return _Forge(WebhookHandler(service, links, forge, settings, token, public_url=public),
                  Publisher(service, links, forge, token, draft=settings.draft, public_url=public,
                            ci_fix_attempts=settings.ci_fix_attempts, pr=settings.pr),
                  settings.webhook_secret())


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.forge = _open(app)
    stop = asyncio.Event()
    syncing = asyncio.create_task(_sync(app.state.forge, stop)) if app.state.forge is not None else None
    try:
        yield
    finally:
        stop.set()
        if syncing is not None:
            await syncing


async def _sync(forge: _Forge, stop: asyncio.Event) -> None:
    interval = float(os.environ.get("ERRAND_FORGE_SYNC") or 5)
    while not stop.is_set():
        try:
            await asyncio.to_thread(catch_up, forge.publisher)
        except Exception:  # the loop must outlive one bad pass
            log.exception("catching up with the forge failed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


router = APIRouter(tags=["forge"], lifespan=_lifespan)


@router.post(WEBHOOK_PATH, status_code=202)
async def github_webhook(request: Request) -> Response:
    """A GitHub delivery: verified, de-duplicated by its delivery id, then acted on."""
    forge: _Forge | None = request.app.state.forge
    if forge is None:
        # 404, not 503: nothing here listens for GitHub until a token is set; the server is fine.
        return problem(404, "no forge is configured here: set GITHUB_TOKEN (see `errand forge connect`)",
                       "forge_not_configured")
    if forge.secret is None:
        return problem(404, "no webhook secret is set: export ERRAND_WEBHOOK_SECRET (or [github] "
                            "webhook_secret_env) where errand serve runs", "forge_not_configured")
    body = await request.body()
    if len(body) > MAX_BODY:
        return problem(413, "the delivery is larger than GitHub sends", "too_large")
    try:
        verify_signature(forge.secret, body, request.headers.get("x-hub-signature-256"))
    except ForgeError as error:
        return problem(401, error.message, error.code)
    delivery = request.headers.get("x-github-delivery", "").strip()
    event = request.headers.get("x-github-event", "").strip()
    if not delivery or not event:
        return problem(400, "a delivery needs X-GitHub-Event and X-GitHub-Delivery", "bad_delivery")
    try:
        payload: Any = json.loads(body)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        return problem(400, "the delivery's body is not a JSON object", "bad_delivery")
    try:
        outcome = await asyncio.to_thread(forge.handler.handle, event, delivery[:80], payload)
    except ErrandError as error:
        return problem(422, error.message, error.code)
    except (KeyError, TypeError, ValueError, AttributeError) as error:  # signed, yet not the shape GitHub sends
        return problem(400, f"the delivery lacks what a {event} event carries ({error!r})", "bad_delivery")
    return JSONResponse({"action": outcome.action, "detail": outcome.detail, "task_id": outcome.task_id},
                        status_code=202 if outcome.task_id else 200)
