"""The forge's face on ``errand serve``: each forge's webhook, and the loops that catch up.

``POST /api/forge/{github,gitea,gitlab}/webhook`` is authenticated by the delivery's own
proof (GitHub's and Gitea's HMAC signature over the raw body, GitLab's secret token), not
by errand's bearer token (a forge cannot send one); the guard lets those paths through
to here, and nothing happens before the proof holds. While the server runs, accepted
tasks from each configured forge get their pull requests and review rounds are pushed,
every ``ERRAND_FORGE_SYNC`` seconds (default 5), so an accept in the web page ends on the
forge as one from ``errand accept`` does. A forge is configured when its token is set.
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
from errand.forge import ForgeError
from errand.forge.hosts.kinds import KINDS, open_forge
from errand.forge.inbound.receivers import Receiver, receiver_for
from errand.forge.inbound.webhooks import WebhookHandler
from errand.forge.links import LinkStore
from errand.forge.outbound.publish import Publisher, catch_up
from errand.forge.settings import DISPLAY
from errand.server.problems import problem
from errand.tasks.service import TaskService

__all__ = ["WEBHOOK_PATH", "WEBHOOK_PATHS", "router"]

log = logging.getLogger("errand.server.forge")
WEBHOOK_PATHS = {kind: f"/api/forge/{kind}/webhook" for kind in KINDS}
WEBHOOK_PATH = WEBHOOK_PATHS["github"]
MAX_BODY = 25 * 1024 * 1024  # GitHub caps a delivery's payload at 25 MB; Gitea and GitLab send less


@dataclass(frozen=True)
class _Forge:
    handler: WebhookHandler
    publisher: Publisher
    secret: str | None
    receiver: Receiver
    secret_env: str


def _open(app: FastAPI, kind: str = "github") -> _Forge | None:
    """The ``kind`` forge from ``forge.toml`` and the environment, or None when its token is not set."""
    service: TaskService = app.state.service
    try:
        forge, settings, token = open_forge(kind)
    except ForgeError as error:
        log.info("no %s forge: %s", kind, error.message)
        return None
    links = LinkStore(service.engine)
    public = os.environ.get("ERRAND_PUBLIC_URL") or None
    return _Forge(WebhookHandler(service, links, forge, settings, token, public_url=public,
                                 separate_numbers=kind == "gitlab"),
                  Publisher(service, links, forge, token, draft=settings.draft, public_url=public,
                            ci_fix_attempts=settings.ci_fix_attempts, pr=settings.pr),
                  settings.webhook_secret(), receiver_for(kind, settings.label), settings.webhook_secret_env)


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    forges = {kind: _open(app, kind) for kind in KINDS}
    app.state.forges = {kind: forge for kind, forge in forges.items() if forge is not None}
    app.state.forge = app.state.forges.get("github")
    stop = asyncio.Event()
    syncing = [asyncio.create_task(_sync(forge, stop)) for forge in app.state.forges.values()]
    try:
        yield
    finally:
        stop.set()
        for task in syncing:
            await task


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


@router.post(WEBHOOK_PATHS["github"], status_code=202)
async def github_webhook(request: Request) -> Response:
    """A GitHub delivery: verified, de-duplicated by its delivery id, then acted on."""
    return await _receive(request, "github")


@router.post(WEBHOOK_PATHS["gitea"], status_code=202)
async def gitea_webhook(request: Request) -> Response:
    """A Gitea or Forgejo delivery: verified, de-duplicated by its delivery id, then acted on."""
    return await _receive(request, "gitea")


@router.post(WEBHOOK_PATHS["gitlab"], status_code=202)
async def gitlab_webhook(request: Request) -> Response:
    """A GitLab delivery: its secret token checked, de-duplicated by its event id, then acted on."""
    return await _receive(request, "gitlab")


async def _receive(request: Request, kind: str) -> Response:
    forge: _Forge | None = request.app.state.forges.get(kind)
    name = DISPLAY[kind]
    if forge is None:
        # 404, not 503: nothing here listens for this forge until its token is set; the server is fine.
        return problem(404, f"no {name} forge is configured here: set its token (see `errand forge connect {kind}`)",
                       "forge_not_configured")
    if forge.secret is None:
        return problem(404, f"no webhook secret is set: export {forge.secret_env} where errand serve runs",
                       "forge_not_configured")
    body = await request.body()
    if len(body) > MAX_BODY:
        return problem(413, f"the delivery is larger than {name} sends", "too_large")
    try:
        forge.receiver.verify(forge.secret, request.headers, body)
    except ForgeError as error:
        return problem(401, error.message, error.code)
    try:
        payload: Any = json.loads(body)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        return problem(400, "the delivery's body is not a JSON object", "bad_delivery")
    try:
        delivery = forge.receiver.read(request.headers, body, payload)
    except ForgeError as error:
        return problem(400, error.message, error.code)
    except (KeyError, TypeError, ValueError, AttributeError) as error:  # proved, yet not the shape the forge sends
        return problem(400, f"the delivery lacks what a {name} event carries ({error!r})", "bad_delivery")
    return await _handle(forge, delivery.event, delivery.id, delivery.payload)


async def _handle(forge: _Forge, event: str, delivery: str, payload: dict[str, Any]) -> Response:
    try:
        outcome = await asyncio.to_thread(forge.handler.handle, event, delivery, payload)
    except ErrandError as error:
        return problem(422, error.message, error.code)
    except (KeyError, TypeError, ValueError, AttributeError) as error:  # signed, yet not the shape the forge sends
        return problem(400, f"the delivery lacks what a {event} event carries ({error!r})", "bad_delivery")
    return JSONResponse({"action": outcome.action, "detail": outcome.detail, "task_id": outcome.task_id},
                        status_code=202 if outcome.task_id else 200)
