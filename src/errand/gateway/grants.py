"""What a grant is: the upstream it forwards to, the budget it stops at, and what it has spent.

A :class:`Grant` is one task's (or run's) right to call one model endpoint
through the gateway: a token the sandbox holds in place of the key, a base URL,
an :class:`Upstream` (where calls go, with the real key), a :class:`Budget`,
and the :class:`Call` records of what went through, metered.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from errand.errors import ConfigError
from errand.gateway.protocols import BASE_PATHS, PROTOCOLS, Protocol
from errand.models import Pricing, Usage, profile_for

__all__ = ["Budget", "Call", "Grant", "Upstream"]

_GRANT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True, repr=False)
class Upstream:
    """Where a grant's calls go: ``protocol``, the endpoint's ``base_url`` as that provider's
    SDK takes it (``https://api.openai.com/v1``, ``https://api.anthropic.com``), and the real
    ``key``. ``bearer`` sends the key as ``Authorization: Bearer`` (an Anthropic OAuth token,
    ``ANTHROPIC_AUTH_TOKEN``) rather than in the protocol's key header. The key never
    appears in the value's repr."""

    protocol: Protocol
    base_url: str
    key: str
    bearer: bool = False

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"unknown gateway protocol {self.protocol!r}; protocols are {', '.join(PROTOCOLS)}",
                              code="invalid_config")
        parts = urlsplit(self.base_url) if isinstance(self.base_url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
            raise ConfigError(f"an upstream's base_url must be an http(s) URL without a query, not "
                              f"{self.base_url!r}", code="invalid_config")
        if not isinstance(self.key, str) or not self.key or any(c in self.key for c in "\r\n\0"):
            raise ConfigError("an upstream's key must be a non-empty string on one line", code="invalid_config")

    def __repr__(self) -> str:
        return f"Upstream({self.protocol!r}, {self.base_url!r}, key=<redacted>)"


@dataclass(frozen=True)
class Budget:
    """Where a grant stops: ``max_tokens`` (prompt and reply together, over all calls) and
    ``max_cost`` (US dollars); either may be None (no limit)."""

    max_tokens: int | None = None
    max_cost: float | None = None

    def __post_init__(self) -> None:
        tokens, cost = self.max_tokens, self.max_cost
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0):
            raise ConfigError(f"a budget's max_tokens must be a non-negative integer, not {tokens!r}",
                              code="invalid_config")
        if cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float)
                                 or not math.isfinite(cost) or cost < 0):
            raise ConfigError(f"a budget's max_cost must be a non-negative number of dollars, not {cost!r}",
                              code="invalid_config")


@dataclass
class Call:
    """One request through a grant, as metered (``number`` counts the grant's requests, those
    refused before the upstream included, as its transcript does): ``usage`` is what the provider reported (None
    when it reported none), ``cost`` its price (None when the model's price is unknown).
    ``complete`` is False for a reply that ended early (a stream cut mid-way: metered for what
    arrived), with ``error`` saying why."""

    number: int
    method: str
    path: str
    model: str | None
    started: float
    status: int | None = None
    streamed: bool = False
    usage: Usage | None = None
    cost: float | None = None
    complete: bool = False
    error: str | None = None
    ended: float | None = None


@dataclass(eq=False)
class Grant:
    """A task's right to one endpoint through the gateway. Give the sandbox ``token`` and
    ``base_url`` (or :meth:`url_at` its own address of the gateway); never the upstream."""

    id: str
    upstream: Upstream = field(repr=False)
    budget: Budget
    pricing: Pricing | None
    token: str = field(repr=False)
    origin: str
    transcript: Path
    calls: list[Call] = field(default_factory=list)
    requests: int = 0  # every request on a route of the grant's protocol, refused ones included
    in_flight: int = 0  # calls forwarded and not yet ended
    held: int = 0  # output tokens the calls under way may still spend (each was held to its share of the budget)
    held_cost: float = 0.0  # what those tokens would cost, at each call's output price
    revoked: bool = False
    created: float = field(default_factory=time.time)
    idle: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    def __post_init__(self) -> None:
        self.idle.set()

    @property
    def base_url(self) -> str:
        """The grant's base URL on the gateway's own address (host side)."""
        return self.url_at(self.origin)

    def url_at(self, origin: str) -> str:
        """The base URL at another address of the gateway (``http://127.0.0.1:3129`` inside a sandbox)."""
        return origin.rstrip("/") + BASE_PATHS[self.upstream.protocol]

    @property
    def usage(self) -> Usage:
        """Every call's tokens, together."""
        return sum((call.usage for call in self.calls if call.usage is not None), Usage())

    @property
    def tokens(self) -> int:
        usage = self.usage
        return usage.input_tokens + usage.output_tokens

    @property
    def cost(self) -> float:
        """Dollars spent on the calls whose price is known."""
        return sum(call.cost for call in self.calls if call.cost is not None)

    def price(self, model: str | None) -> Pricing | None:
        """The grant's own prices, else errand's table's for ``model``."""
        if self.pricing is not None:
            return self.pricing
        return profile_for(model).pricing if model else None

    def output_left(self, model: str | None) -> int | None:
        """Output tokens a new call of ``model`` may be given: what the token budget has left, and
        what the cost budget can still pay for at the model's output price, each less what the calls
        under way hold; None without a budget that bounds them."""
        left: list[int] = []
        if self.budget.max_tokens is not None:
            left.append(self.budget.max_tokens - self.tokens - self.held)
        pricing = self.price(model)
        if self.budget.max_cost is not None and pricing is not None and pricing.output > 0:
            dollars = self.budget.max_cost - self.cost - self.held_cost
            left.append(math.floor(dollars * 1_000_000 / pricing.output))
        return min(left) if left else None

    def hold(self, tokens: int, model: str | None) -> float:
        """Hold ``tokens`` of output for a call under way; what they would cost (give it to :meth:`release`)."""
        pricing = self.price(model)
        dollars = tokens * pricing.output / 1_000_000 if pricing is not None else 0.0
        self.held += tokens
        self.held_cost += dollars
        return dollars

    def release(self, tokens: int, dollars: float) -> None:
        self.held -= tokens
        self.held_cost -= dollars

    def spent(self) -> str | None:
        """Why the budget allows no further call, or None while it does."""
        budget = self.budget
        if budget.max_tokens is not None and self.tokens >= budget.max_tokens:
            return f"its token budget is spent ({self.tokens:,} of {budget.max_tokens:,} tokens)"
        if budget.max_cost is not None and self.cost >= budget.max_cost:
            return f"its cost budget is spent (${self.cost:.4f} of ${budget.max_cost:.4f})"
        return None


def check_grant_id(grant_id: object) -> str:
    if not isinstance(grant_id, str) or not _GRANT_ID.fullmatch(grant_id):
        raise ConfigError(f"a grant's id is letters, digits, '.', '_' and '-' (it names its transcript file), "
                          f"not {grant_id!r}", code="invalid_config")
    return grant_id
