"""How much a run may spend, and what it has spent so far."""

from __future__ import annotations

import math
from dataclasses import dataclass

from errand.agent.exits import BudgetExhausted
from errand.errors import ConfigError

__all__ = ["Budgets", "Spent"]


@dataclass(frozen=True)
class Budgets:
    """Limits on one run; ``None`` means no limit.

    ``max_steps`` counts model calls; ``max_tokens`` input plus output tokens;
    ``max_cost`` US dollars (calls whose cost is unknown count as free);
    ``max_seconds`` the run's working time, not the time it waits for a
    person's answer. ``max_repeats`` is the stuck detector: that many identical
    tool calls (name and arguments) in a row end the run as ``stuck``.
    """

    max_steps: int | None = 100
    max_tokens: int | None = None
    max_cost: float | None = None
    max_seconds: float | None = None
    max_repeats: int = 3

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


@dataclass
class Spent:
    """What a run has used; :meth:`check` raises :class:`BudgetExhausted` when a budget is gone."""

    steps: int = 0
    tokens: int = 0
    cost: float = 0.0
    seconds: float = 0.0

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
