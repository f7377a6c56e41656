"""How much a run may spend, and what it has spent so far."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from errand.agent.exits import BudgetExhausted
from errand.errors import ConfigError
from errand.models import Usage

__all__ = ["Budgets", "Spent"]


@dataclass(frozen=True)
class Budgets:
    """Limits on one run; ``None`` means no limit.

    ``max_steps`` counts model calls; ``max_tokens`` input plus output tokens;
    ``max_cost`` US dollars (calls whose cost is unknown count as free);
    ``max_seconds`` the run's working time, not the time it waits for a
    person's answer. ``max_repeats`` is the stuck detector: that many identical
    tool calls (name and arguments) in a row end the run as ``stuck``.
    ``max_malformed`` replies in a row with no tool call that could run (an
    unknown tool, arguments that are not JSON or do not fit, no call at all)
    end it as ``error``; each one before that is answered so the model can
    correct itself.
    """

    max_steps: int | None = 100
    max_tokens: int | None = None
    max_cost: float | None = None
    max_seconds: float | None = None
    max_repeats: int = 3
    max_malformed: int = 5

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name} must be a positive integer or None, not {value!r}", code="invalid_budget")
        for name in ("max_cost", "max_seconds"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or not math.isfinite(value) or value <= 0):
                raise ConfigError(f"{name} must be a positive number or None, not {value!r}", code="invalid_budget")
        if isinstance(self.max_repeats, bool) or not isinstance(self.max_repeats, int) or self.max_repeats < 2:
            raise ConfigError(f"max_repeats must be an integer of at least 2, not {self.max_repeats!r}",
                              code="invalid_budget")
        if isinstance(self.max_malformed, bool) or not isinstance(self.max_malformed, int) or self.max_malformed < 1:
            raise ConfigError(f"max_malformed must be a positive integer, not {self.max_malformed!r}",
                              code="invalid_budget")


@dataclass
class Spent:
    """What a run has used; :meth:`check` raises :class:`BudgetExhausted` when a budget is gone.

    ``tokens`` is input plus output, the figure ``max_tokens`` limits; the input
    splits into ``cache_read_tokens``, ``cache_write_tokens`` and the uncached
    rest. ``cost`` sums the calls whose price is known; ``unpriced_calls``
    counts the others (a model errand has no prices for). Summaries written to
    condense the conversation count here too, but not as steps.
    """

    steps: int = 0
    tokens: int = 0
    cost: float = 0.0
    seconds: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    unpriced_calls: int = 0
    retries: int = 0
    condensations: int = 0

    def add(self, usage: Usage, cost: float | None) -> None:
        """Count one model call's ``usage`` and ``cost`` (``None``: unknown)."""
        self.tokens += usage.input_tokens + usage.output_tokens
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        if cost is None:
            self.unpriced_calls += 1
        else:
            self.cost += cost

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": round(self.seconds, 3)}

    def refusal(self, budgets: Budgets, tokens: int) -> tuple[str, str] | None:
        """Why one more model call of about ``tokens`` tokens, made outside the agent's loop
        (distilling memories from the run), would break ``budgets``: ``(reason, budget)``, or
        None if it fits. Its cost is judged at the run's own price per token so far."""
        if budgets.max_tokens is not None and self.tokens + tokens > budgets.max_tokens:
            return (f"it would take about {tokens} tokens, and the run has {budgets.max_tokens - self.tokens} "
                    f"of its {budgets.max_tokens} left", "tokens")
        if budgets.max_cost is not None:
            price = self.cost / self.tokens if self.tokens else 0.0
            left = budgets.max_cost - self.cost
            if left <= 0 or price * tokens > left:
                return (f"it would cost about ${price * tokens:.4f}, and the run has ${max(left, 0):.4f} of its "
                        f"${budgets.max_cost:.4f} left", "cost")
        return None

    def check(self, budgets: Budgets) -> None:
        if budgets.max_steps is not None and self.steps >= budgets.max_steps:
            raise BudgetExhausted(f"step budget used up ({self.steps} of {budgets.max_steps} steps)", "steps")
        if budgets.max_tokens is not None and self.tokens >= budgets.max_tokens:
            raise BudgetExhausted(f"token budget used up ({self.tokens} of {budgets.max_tokens})", "tokens")
        if budgets.max_cost is not None and self.cost >= budgets.max_cost:
            raise BudgetExhausted(f"cost budget used up (${self.cost:.4f} of ${budgets.max_cost:.4f})", "cost")
        if budgets.max_seconds is not None and self.seconds >= budgets.max_seconds:
            raise BudgetExhausted(f"time budget used up ({self.seconds:.1f}s of {budgets.max_seconds:g}s)",
                                  "seconds")
