"""When two similar texts say different things, so that merging one into the other would lose a fact.

:meth:`MemoryStore.add <errand.memory.MemoryStore.add>` merges a new text into
a near-duplicate (same content words, mostly) only when :func:`conflict` finds
nothing between them. Two texts that differ in a negation ("tests must run
with ``--no-network``" / "must *not* run …"), in their numbers (ports,
versions, limits), or in the order of the values or steps they name ("8080
for the API, 3000 for the web" / the other way round; "migrate, then seed" /
"seed, then migrate") say different things however many words they share, and
both are kept. Without a model nothing can tell a changed fact from a
contradiction, so neither replaces the other.
"""

from __future__ import annotations

import re

from errand.memory.text import normalize, terms

__all__ = ["conflict"]

_NEGATION = re.compile(r"\b(?:not|no|never|none|nothing|nobody|neither|nor|without|cannot|n't|don't|doesn't|"
                       r"isn't|aren't|wasn't|weren't|won't|shouldn't|mustn't|can't|avoid|forbidden|disallowed)\b")
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
_CODE = re.compile(r"`([^`\n]+)`")
# Words that make order part of the meaning: steps, precedence.
_SEQUENCE = re.compile(r"\b(?:then|before|after|first|second|finally|next|followed|precedes?|prior)\b|->|→|;")


def conflict(first: str, second: str) -> str | None:
    """Why two similar texts must not be merged (they say different things), or None if nothing is found."""
    a, b = normalize(first), normalize(second)
    if _negations(a) != _negations(b):
        return "one says not, the other does not"
    numbers_a, numbers_b = _NUMBER.findall(a), _NUMBER.findall(b)
    if sorted(numbers_a) != sorted(numbers_b):
        return "their numbers differ"
    code_a, code_b = _CODE.findall(a), _CODE.findall(b)
    if numbers_a != numbers_b or (code_a != code_b and sorted(code_a) == sorted(code_b)):
        return "they name the same values in a different order"
    if (_SEQUENCE.search(a) or _SEQUENCE.search(b)) and _order(a, b) != _order(b, a):
        return "they name the same steps in a different order"
    return None


def _negations(text: str) -> int:
    return len(_NEGATION.findall(text.replace("’", "'")))


def _order(text: str, other: str) -> list[str]:
    """The content words ``text`` shares with ``other``, in ``text``'s order (first appearance)."""
    shared = set(terms(text)) & set(terms(other))
    return list(dict.fromkeys(word for word in terms(text) if word in shared))


