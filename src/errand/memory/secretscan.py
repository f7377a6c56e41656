"""Refuse text that looks like it holds a secret, before anything is stored.

A memory is shown to every later agent and kept in plain SQL, so a key that
slipped into one would leak far and for long. The detectors are the usual
ones of secret scanners (gitleaks, detect-secrets): providers' token formats,
private-key blocks, credentials in URLs, webhook URLs, ``password = …``-style
assignments, and long high-entropy strings given as a value. They err towards
refusing: a refused memory can be reworded (``the API key is in
$OPENAI_API_KEY``), a leaked secret cannot be taken back. What is known not to
be a secret passes: base64 of readable text or of a file format (test
fixtures) and subresource-integrity digests (``sha512-…`` in lockfiles).

**Linear time.** Every ``add()`` (an agent's ``remember``, ``POST
/api/memories``) runs this over text that someone else wrote, so no input may
make it slow. Each pattern starts only where a run of its characters starts
(a negative look-behind of the run's own class) and consumes runs possessively
(``*+``, ``++``), so the regex engine never backtracks into a run and runs
started at different places do not overlap: every character is looked at a
bounded number of times per pattern. Values are read at most
:data:`MAX_VALUE_CHARS` characters far.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import string
from collections import Counter

from errand.memory.errors import SecretRefused

__all__ = ["MAX_VALUE_CHARS", "check_no_secret", "find_secret"]

#: How far an assigned value is read: a secret shows itself in its first characters.
MAX_VALUE_CHARS = 128

_TOKEN = r"A-Za-z0-9_-"


def _starting(prefix: str, before: str) -> str:
    """``prefix`` where it is not preceded by a character of ``before``.

    The look-behind comes after the literal, not before it: a pattern that starts with a literal is
    searched for by the regex engine's fast literal scan; one that starts with a look-behind is tried
    at every position of the text.
    """
    return f"{prefix}(?<![{before}]{prefix})"


_PROVIDER_TOKENS: tuple[tuple[str, str], ...] = (
    ("private_key", r"-----BEGIN (?:[A-Z0-9]{1,20} ){0,4}PRIVATE KEY(?: BLOCK)?-----"),
    ("aws_access_key", r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA)(?<![A-Za-z0-9]....)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    ("github_token", r"(?:gh[pousr]_(?<![A-Za-z0-9_]...._)[A-Za-z0-9]{30,}+"
                     r"|" + _starting("github_pat_", "A-Za-z0-9_") + r"[A-Za-z0-9_]{40,}+)(?!\w)"),
    ("gitlab_token", _starting("glpat-", _TOKEN) + f"[{_TOKEN}]{{20}}"),
    ("anthropic_key", _starting("sk-ant-", _TOKEN) + f"[{_TOKEN}]{{20}}"),
    ("openai_key", _starting("sk-", _TOKEN) + f"(?:proj-|svcacct-|admin-)?[{_TOKEN}]{{20}}"),
    ("slack_token", r"xox[abprs]-(?<![A-Za-z0-9-]xox.-)[A-Za-z0-9-]{10}"),
    ("slack_webhook", r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_]{6,}+/[A-Za-z0-9_/]{12,}+"),
    ("stripe_key", r"k_(?:live|test)_(?<![A-Za-z0-9_][rs]k_...._)[A-Za-z0-9]{16,}+(?!\w)"),
    ("google_api_key", _starting("AIza", _TOKEN) + f"[{_TOKEN}]{{35}}(?![{_TOKEN}])"),
    ("npm_token", _starting("npm_", "A-Za-z0-9_") + r"[A-Za-z0-9]{36}(?!\w)"),
    ("pypi_token", _starting("pypi-", _TOKEN) + f"[{_TOKEN}]{{50}}"),
    ("jwt", _starting("eyJ", "." + _TOKEN) + f"[{_TOKEN}]{{10,}}+\\.eyJ[{_TOKEN}]{{10,}}+\\.[{_TOKEN}]{{10}}"),
    # scheme://user:password@ and scheme://:password@ (Redis and others take a password alone).
    ("url_credentials", r"://(?<=[a-z0-9]://)[^\s/:@]*+:[^\s/@]{3,}+@"),
)
_PROVIDERS = tuple((name, re.compile(pattern)) for name, pattern in _PROVIDER_TOKENS)
# These read the text lower-cased (ASCII letters only, so every position stays where it was): a
# case-insensitive regex is several times slower than one over lower-cased text.
_BEARER = re.compile(r"authorization:\s*+(?:bearer|basic|token)\s++[a-z0-9._~+/=-]{12}")
_SECRET_NAME = (r"(?:pass(?:w(?:or)?d|phrase)|pwd|secret|token|a(?:pi[_-]?key|ccess[_-]?key|uth[_-]?token)"
                r"|private[_-]?key|c(?:lient[_-]?secret|redentials?))")
# At least six characters: a shorter value is never taken for a secret, so it need not reach Python.
_VALUE = rf"['\"]?(?P<value>[^\s'\"`,;]{{6,{MAX_VALUE_CHARS}}})"
# `password = hunter2`, `API_KEY: "abc…"`, `export SECRET=…`, `--token abc…`, `the password is hunter2`.
# A match starts at the secret's name, and what follows the name within the key is bounded, so a long
# run of names (`pwd-pwd-pwd…`) costs a few dozen characters per name, never the rest of the run.
_ASSIGNMENTS = (
    re.compile(rf"{_SECRET_NAME}[\w-]{{0,24}}+['\"]?\s*+[:=]\s*+{_VALUE}"),
    re.compile(rf"--(?<![\w-]--)(?=[\w-]{{0,32}}?{_SECRET_NAME})[\w-]{{0,64}}+\s++{_VALUE}"),
    re.compile(rf"{_SECRET_NAME}\s++(?:is|was|=)\s++{_VALUE}"),
)
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
# Values that name where a secret lives rather than being one.
_REFERENCE = re.compile(r"(?:\$\{?\w++\}?|%\w++%|<[^>]*+>|\*++|x{3,}+|\.{3}|…|env(?:iron)?\b.*+|none|null|true|false)",
                        re.IGNORECASE)
_DIGIT = re.compile(r"[0-9]")
_RUN = re.compile(r"[A-Z]++|[a-z]++|[0-9]++")
_SEPARATOR = re.compile(r"[/_+=-]")
_LOWERCASE_WORDS = re.compile(r"[a-z]++(?:-[a-z]++)*+")
_LONG_TOKEN = re.compile(r"(?<![\w/.+=-])[A-Za-z0-9+/_=-]{32,}+(?!\.?[\w-])")
# Subresource integrity (`"integrity": "sha512-…"` in lockfiles): a digest of a published file, not a key.
_INTEGRITY = re.compile(r"sha(?:1|256|384|512)-[A-Za-z0-9+/]++=*+")
_BASE64 = re.compile(r"[A-Za-z0-9+/]++={0,2}|[A-Za-z0-9_-]++={0,2}")
# What a test fixture encodes: file formats by their first bytes.
_FILE_MAGIC = (b"\x89PNG", b"GIF8", b"\xff\xd8\xff", b"%PDF", b"\x1f\x8b", b"PK\x03\x04", b"<?xml", b"RIFF")


def find_secret(text: str) -> str | None:
    """The name of the first detector ``text`` trips, or None when it looks clean."""
    for name, pattern in _PROVIDERS:
        if pattern.search(text):
            return name
    lowered = text.translate(_ASCII_LOWER)
    if _BEARER.search(lowered):
        return "bearer_token"
    for pattern in _ASSIGNMENTS:
        for match in pattern.finditer(lowered):
            start, end = match.span("value")
            if _starts_a_name(text, match.start()) and _looks_like_secret_value(text[start:end]):
                return "assigned_secret"
    for match in _LONG_TOKEN.finditer(text):
        if _random_looking(match.group(0)):
            return "high_entropy_string"
    return None


def check_no_secret(text: str) -> None:
    """Raise :class:`SecretRefused` when ``text`` looks like it holds a secret (the secret is never echoed)."""
    detector = find_secret(text)
    if detector is not None:
        raise SecretRefused(
            f"refused: the text looks like it contains a secret ({detector.replace('_', ' ')}); "
            "memories are shown to every later task, so say where the secret lives "
            "(for example an environment variable's name) instead of the secret itself",
            detector=detector,
        )


def _starts_a_name(text: str, position: int) -> bool:
    """Whether a secret's name found at ``position`` is a name of its own or the end of a longer key
    (``DB_PASSWORD``), not the inside of a word (``bypass word``: a match at ``pass`` inside it is)."""
    return position == 0 or not text[position - 1].isalnum()


def _looks_like_secret_value(value: str) -> bool:
    value = value.strip("'\"`.")
    # Too short, a reference, a flag (`--token --other`) or prose (`--token command-line`).
    if len(value) < 6 or value.startswith("-") or _REFERENCE.fullmatch(value) or _LOWERCASE_WORDS.fullmatch(value):
        return False
    # A plain word ("the token is stored in vault") is prose; a secret has digits or symbols or mixed case.
    return value != value.lower() or any(not c.isalpha() for c in value)


def _random_looking(token: str) -> bool:
    """Base64 or an API key: digits somewhere, and a word whose letters switch case every couple of characters.

    Identifiers (``RELATIVE_PATH_TO_SYSROOT``), target triples, CamelCase names and hex digests (commit ids,
    content hashes: provenance, not secrets) have long single-case runs, so they pass; so do integrity digests
    and base64 that decodes to readable text or to a known file format.
    """
    # Cheapest tests first: this runs once per long token, and a text can hold thousands.
    if not _DIGIT.search(token) or len(set(token)) < 12 or _INTEGRITY.fullmatch(token):
        return False  # fewer than 12 distinct characters cannot reach 3.5 bits each
    switches_case = any(
        len(word) >= 10 and not word.isupper() and not word.islower() and len(word) / len(_RUN.findall(word)) < 2.5
        for word in _SEPARATOR.split(token)
    )
    return switches_case and _entropy(token) >= 3.5 and not _encodes_a_fixture(token)


def _encodes_a_fixture(token: str) -> bool:
    """Whether ``token`` is base64 of readable text (with spaces or line breaks) or of a file format."""
    if not _BASE64.fullmatch(token):
        return False
    try:
        data = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_" if "-" in token or "_" in token
                                else None, validate=True)
    except (binascii.Error, ValueError):
        return False
    if data.startswith(_FILE_MAGIC):
        return True
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    # Readable text with word breaks: a sentence or a document. A password has no spaces.
    readable = all(c.isprintable() or c in "\n\r\t" for c in decoded)
    return readable and any(c in " \n\t" for c in decoded)


def _entropy(token: str) -> float:
    counts = Counter(token)
    return -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
