"""Text helpers shared by the store, ingestion and retrieval: normalizing, fingerprints, likeness."""

from __future__ import annotations

import hashlib
import re
import unicodedata

__all__ = ["MAX_TEXT_CHARS", "fingerprint", "has_lone_surrogate", "jaccard", "likeness", "normalize", "terms",
           "without_lone_surrogates"]

MAX_TEXT_CHARS = 4000  # a memory is a statement, not a document

_WORD = re.compile(r"[a-z0-9_]+(?:[.-][a-z0-9_]+)*")
_STOP = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "has", "have", "how", "i", "if",
    "in", "is", "it", "its", "of", "on", "or", "so", "that", "the", "this", "to", "was", "we", "were", "what",
    "when", "where", "which", "who", "will", "with", "you", "your",
))


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a code point UTF-8 cannot encode (half of a UTF-16 pair, as broken JSON makes)."""
    return _SURROGATE.search(text) is not None


def without_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD, for text that is searched with, not stored."""
    return _SURROGATE.sub("\ufffd", text)


def normalize(text: str) -> str:
    """Unicode-folded, lower-cased, whitespace-collapsed text: what two copies of one memory share."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"\s+", " ", folded).strip()


def fingerprint(text: str) -> str:
    """The sha256 of the normalized text, for exact-duplicate look-ups."""
    return hashlib.sha256(normalize(text).encode()).hexdigest()


def terms(text: str) -> list[str]:
    """Content words: lower-cased, stop words dropped, a light plural strip (``tests`` → ``test``)."""
    words = _WORD.findall(normalize(text))
    return [_stem(word) for word in words if word not in _STOP]


def likeness(first: str, second: str) -> float:
    """How alike two texts are, 0..1: the Jaccard index of their content-word sets."""
    a, b = set(terms(first)), set(terms(second))
    if not a or not b:
        return 1.0 if normalize(first) == normalize(second) else 0.0
    return jaccard(a, b)


def jaccard(first: set[str], second: set[str]) -> float:
    union = len(first | second)
    return len(first & second) / union if union else 1.0


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word
