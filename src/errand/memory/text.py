"""Text helpers shared by the store, ingestion and retrieval: normalizing, fingerprints, likeness."""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata

__all__ = ["MAX_TEXT_CHARS", "fingerprint", "has_lone_surrogate", "jaccard", "likeness", "normalize", "query_terms",
           "query_words", "search_terms", "terms", "without_lone_surrogates", "words"]

MAX_TEXT_CHARS = 4000  # a memory is a statement, not a document

# Letters and digits of any script; `pytest.ini`, `x86-64` and `Node.js` stay one word (their parts are
# searchable too, see search_terms). `_` joins, as it does in identifiers.
_WORD = re.compile(r"\w+(?:[.-]\w+)*")
_STOP = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "has", "have", "how", "i", "if",
    "in", "is", "it", "its", "of", "on", "or", "s", "so", "t", "that", "the", "this", "to", "was", "we", "were", "what",
    "when", "where", "which", "who", "will", "with", "you", "your",
))
# What a question or a task description says around its subject: question words, auxiliaries and the
# requests people make of an agent. Rare in memories, so BM25 would rate them highly and match memories
# on "how" or "should" alone.
_QUERY_STOP = _STOP | frozenset((
    "about", "after", "all", "also", "am", "any", "anything", "before", "being", "but", "can", "could", "did",
    "doing", "done", "each", "every", "get", "gets", "getting", "got", "here", "into", "just", "me", "my", "need",
    "needs", "not", "now", "our", "ourselves", "out", "please", "should", "shall", "some", "something", "than",
    "then", "there", "these", "they", "those", "us", "want", "way", "ways", "whether", "why", "would", "yourself",
    "sure", "make", "let", "lets", "like", "know", "tell", "find", "see", "look", "thing", "things", "one",
))


def normalize(text: str) -> str:
    """Unicode-folded, lower-cased, whitespace-collapsed text: what two copies of one memory share."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"\s+", " ", folded).strip()


def fingerprint(text: str) -> str:
    """The sha256 of the normalized text, for exact-duplicate look-ups."""
    return hashlib.sha256(normalize(text).encode()).hexdigest()


def terms(text: str) -> list[str]:
    """Content words, in any script: lower-cased, stop words dropped, a light plural strip (``tests`` → ``test``)."""
    words = _WORD.findall(normalize(text))
    return [_plural(word) for word in words if word not in _STOP]


def search_terms(text: str) -> list[str]:
    """What the lexical index holds for a text: its terms, and the parts of compound ones
    (``pytest.ini`` → ``pytest.ini``, ``pytest``, ``ini``), each lightly stemmed."""
    found: list[str] = []
    for word in _WORD.findall(normalize(text)):
        found.extend(_expanded(word))
    return found


@functools.lru_cache(maxsize=65_536)
def _expanded(word: str) -> tuple[str, ...]:
    # Cached: a project's vocabulary is small next to its text, and this runs once per word of every memory.
    if word in _STOP:
        return ()
    if len(word) > 2 and ("." in word or "-" in word or "_" in word):
        return (_stem(word), *(_stem(part) for part in re.split(r"[._-]+", word) if part and part not in _STOP))
    return (_stem(word),)


def query_terms(text: str) -> list[str]:
    """The distinct search terms of a question or task description (its framing words dropped, unless
    nothing else is left)."""
    words = [word for word in _WORD.findall(normalize(text)) if word not in _QUERY_STOP]
    return list(dict.fromkeys(search_terms(" ".join(words)) or search_terms(text) or _WORD.findall(normalize(text))))


def words(text: str) -> list[str]:
    """A text's distinct words as the index splits them, before stemming, stop words kept: what the
    static query encoder holds a vector for (a word's vector is the model's, not its stem's)."""
    return list(dict.fromkeys(_WORD.findall(normalize(text))))


def query_words(text: str) -> list[str]:
    """The distinct words of a question or task description, unstemmed, its framing words dropped
    (unless nothing else is left), as :func:`query_terms` drops them."""
    every = words(text)
    return [word for word in every if word not in _QUERY_STOP] or every


def likeness(first: str, second: str) -> float:
    """How alike two texts are, 0..1: the Jaccard index of their content-word sets."""
    a, b = set(terms(first)), set(terms(second))
    if not a or not b:
        return 1.0 if normalize(first) == normalize(second) else 0.0
    return jaccard(a, b)


def jaccard(first: set[str], second: set[str]) -> float:
    union = len(first | second)
    return len(first & second) / union if union else 1.0


def _plural(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _stem(word: str) -> str:
    """Plural and verb endings off English words (``tests``, ``testing``, ``tested`` → ``test``;
    ``configure``, ``configured`` → ``configur``); other scripts, identifiers and short words stay whole."""
    if not word.isascii() or not word.isalpha() or len(word) <= 3:
        return word
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 5 and word.endswith("ing"):
        word = _undouble(word[:-3])
    elif len(word) > 4 and word.endswith("ed") and not word.endswith("eed"):
        word = _undouble(word[:-2])
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    # The `e` a suffix swallows (configure → configured) goes from every stem, so both spell `configur`.
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


def _undouble(stem: str) -> str:
    """running → run; but fall, pass and buzz keep their double letter."""
    if len(stem) > 3 and stem[-1] == stem[-2] and stem[-1] not in "lsz":
        return stem[:-1]
    return stem


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a code point UTF-8 cannot encode (half of a UTF-16 pair, as broken JSON makes)."""
    return _SURROGATE.search(text) is not None


def without_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD, for text that is searched with, not stored."""
    return _SURROGATE.sub("\ufffd", text)
