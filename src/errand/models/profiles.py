"""What errand knows about a model beyond its name: its context window and its prices.

Neither provider reports a call's cost, and neither says a model's window until
a request overflows it, so errand keeps a table of the common models
(:data:`KNOWN`). A dated name (``claude-sonnet-4-5-20250929``) takes the entry of
its longest known prefix. A model the table does not know has no window and no
prices: its runs are kept short only when the provider refuses a long request,
and its cost counts as unknown. A ``[models.NAME]`` in errand's settings file
can give both (see :mod:`errand.models.catalog`)::

    context_window = 16384
    price = { input = 0.5, output = 1.5, cache_read = 0.05, cache_write = 0.625 }   # USD per million tokens

Prices are US dollars per million tokens, as the providers publish them, taken
from their price pages in late 2025; a price that changed is one
``[models.NAME]`` away from right.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from errand.errors import ConfigError
from errand.models.protocol import Usage

__all__ = ["KNOWN", "ModelProfile", "Pricing", "profile_for"]

_MILLION = 1_000_000


@dataclass(frozen=True)
class Pricing:
    """US dollars per million tokens: uncached ``input``, ``output``, and prompt tokens read
    from (``cache_read``) or written to (``cache_write``) the provider's cache."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cache_read", "cache_write"):
            value = getattr(self, name)
            if value is None and name.startswith("cache"):
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"price {name} must be a non-negative number of dollars per million tokens, "
                                  f"not {value!r}", code="invalid_config")

    def cost(self, usage: Usage) -> float:
        """The dollars ``usage`` costs; cache prices default to the input price when not given."""
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        return (usage.uncached_input_tokens * self.input + usage.cache_read_tokens * read
                + usage.cache_write_tokens * write + usage.output_tokens * self.output) / _MILLION


@dataclass(frozen=True)
class ModelProfile:
    """A model's ``context_window`` (tokens, prompt and reply together) and ``pricing``;
    ``None`` where errand does not know."""

    context_window: int | None = None
    pricing: Pricing | None = None

    def __post_init__(self) -> None:
        window = self.context_window
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1024):
            raise ConfigError(f"context_window must be a number of tokens of at least 1024, not {window!r}",
                              code="invalid_config")

    def cost(self, usage: Usage) -> float | None:
        return None if self.pricing is None else self.pricing.cost(usage)

    def overridden(self, context_window: int | None, pricing: Pricing | None) -> ModelProfile:
        """This profile with whatever a settings file gave in place of the table's."""
        return ModelProfile(context_window if context_window is not None else self.context_window,
                            pricing if pricing is not None else self.pricing)


def _openai(window: int, prompt: float, cached: float, output: float) -> ModelProfile:
    # OpenAI caches automatically: reads are discounted, writes cost the plain input price.
    return ModelProfile(window, Pricing(prompt, output, cache_read=cached, cache_write=prompt))


def _anthropic(window: int, prompt: float, output: float) -> ModelProfile:
    # Anthropic prices cache reads at a tenth of input and five-minute cache writes at 1.25 times.
    return ModelProfile(window, Pricing(prompt, output, cache_read=prompt / 10, cache_write=prompt * 1.25))


#: The common models, by the provider's name for them.
KNOWN: dict[str, ModelProfile] = {
    "gpt-5": _openai(400_000, 1.25, 0.125, 10.0),
    "gpt-5-mini": _openai(400_000, 0.25, 0.025, 2.0),
    "gpt-5-nano": _openai(400_000, 0.05, 0.005, 0.4),
    "gpt-4.1": _openai(1_047_576, 2.0, 0.5, 8.0),
    "gpt-4.1-mini": _openai(1_047_576, 0.4, 0.1, 1.6),
    "gpt-4.1-nano": _openai(1_047_576, 0.1, 0.025, 0.4),
    "gpt-4o": _openai(128_000, 2.5, 1.25, 10.0),
    "gpt-4o-mini": _openai(128_000, 0.15, 0.075, 0.6),
    "o3": _openai(200_000, 2.0, 0.5, 8.0),
    "o3-mini": _openai(200_000, 1.1, 0.55, 4.4),
    "o4-mini": _openai(200_000, 1.1, 0.275, 4.4),
    "claude-opus-4-5": _anthropic(200_000, 5.0, 25.0),
    "claude-opus-4-1": _anthropic(200_000, 15.0, 75.0),
    "claude-opus-4": _anthropic(200_000, 15.0, 75.0),
    "claude-sonnet-4-5": _anthropic(200_000, 3.0, 15.0),
    "claude-sonnet-4": _anthropic(200_000, 3.0, 15.0),
    "claude-3-7-sonnet": _anthropic(200_000, 3.0, 15.0),
    "claude-haiku-4-5": _anthropic(200_000, 1.0, 5.0),
    "claude-3-5-haiku": _anthropic(200_000, 0.8, 4.0),
}


def profile_for(model: str) -> ModelProfile:
    """The table's entry for ``model`` or its longest known prefix (``gpt-4.1-2025-04-14`` is
    ``gpt-4.1``), else an empty profile."""
    name = model.strip().lower()
    if "/" in name:  # a router's name such as openai/gpt-4.1
        name = name.rsplit("/", 1)[1]
    candidates = [known for known in KNOWN if name == known or name.startswith(known + "-")]
    return KNOWN[max(candidates, key=len)] if candidates else ModelProfile()
