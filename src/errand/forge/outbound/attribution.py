"""Who an accepted commit credits: the forge user who asked, as ``Co-authored-by``.

The address is the forge's own no-reply form for that user, so the forge links the
commit to their account without errand knowing (or publishing) a real address.
GitHub and GitHub Enterprise: ``<id>+<login>@users.noreply.<host>``, the host being
the forge's web host (``api.github.com`` serves ``github.com``; an Enterprise server's
API lives under its own host), derived from the configured base URL, never assumed.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from errand.forge.protocol import Forge
from errand.tasks.service import TaskService

__all__ = ["credit_asker", "noreply_address", "web_host"]

_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")


def web_host(base_url: str) -> str:
    """The host people browse for the forge whose REST API is at ``base_url``."""
    host = (urlsplit(base_url).hostname or "").lower()
    return host.removeprefix("api.") if host.startswith("api.") else host


def noreply_address(forge: Forge, login: str, user_id: int | None) -> str:
    """The no-reply address that ``forge`` attributes to ``login``."""
    host = web_host(forge.base_url)
    if forge.name == "github":
        return f"{user_id}+{login}@users.noreply.{host}" if user_id is not None else f"{login}@users.noreply.{host}"
    return f"{login}@noreply.{host}"


def credit_asker(service: TaskService, forge: Forge, task_id: str, login: str | None, user_id: int | None) -> bool:
    """Record that ``task_id``'s commit credits ``login``; False for no login or one that is no
    forge login (a bot's ``name[bot]`` is not a person to credit)."""
    if not login or not _LOGIN.match(login):
        return False
    service.credit(task_id, login, noreply_address(forge, login, user_id))
    return True
