"""Refuse text that looks like it holds a secret, before anything is stored.

A memory is shown to every later agent and kept in plain SQL, so a key that
slipped into one would leak far and for long. The detectors are the usual
ones of secret scanners (gitleaks, detect-secrets): providers' token formats,
private-key blocks, credentials in URLs, ``password = …``-style assignments,
and long high-entropy strings given as a value. They err towards refusing: a
refused memory can be reworded (``the API key is in $OPENAI_API_KEY``), a
leaked secret cannot be taken back.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from errand.memory.errors import SecretRefused

__all__ = ["check_no_secret", "find_secret"]

_PROVIDER_TOKENS: tuple[tuple[str, str], ...] = (
    ("private_key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    ("aws_access_key", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA)[A-Z0-9]{16}\b"),
    ("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})\b"),
    ("gitlab_token", r"\bglpat-[A-Za-z0-9_-]{20,}\b"),
    ("anthropic_key", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    ("openai_key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("slack_token", r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    ("stripe_key", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b"),
    ("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}\b"),
    ("npm_token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("pypi_token", r"\bpypi-[A-Za-z0-9_-]{50,}"),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
    ("url_credentials", r"\b[a-z][a-z0-9+.-]*://[^\s/:@]+:[^\s/@]{3,}@"),
    ("bearer_token", r"(?i)\bauthorization:\s*(?:bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{12,}"),
)
_PROVIDERS = tuple((name, re.compile(pattern)) for name, pattern in _PROVIDER_TOKENS)

_SECRET_NAME = (r"(?:passw(?:or)?d|passphrase|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key"
                r"|client[_-]?secret|credentials?|auth[_-]?token)")
# `password = hunter2`, `API_KEY: "abc…"`, `export SECRET=…`, `--token abc…`, `the password is hunter2`.
_ASSIGNMENTS = (
    re.compile(rf"(?i)\b[\w-]*{_SECRET_NAME}[\w-]*['\"]?\s*[:=]\s*['\"]?(?P<value>[^\s'\"`,;]+)"),
    re.compile(rf"(?i)--[\w-]*{_SECRET_NAME}[\w-]*\s+['\"]?(?P<value>[^\s'\"`,;]+)"),
    re.compile(rf"(?i)\b{_SECRET_NAME}\s+(?:is|was|=)\s+['\"]?(?P<value>[^\s'\"`,;]+)"),
)
# Values that name where a secret lives rather than being one.
_REFERENCE = re.compile(r"^(?:\$\{?\w+\}?|%\w+%|<[^>]*>|\*+|x{3,}|\.{3}|…|env(?:iron)?\b.*|none|null|true|false)$",
                        re.IGNORECASE)
_LONG_TOKEN = re.compile(r"(?<![\w/.-])[A-Za-z0-9+/_=-]{32,}(?![\w.-])")


def find_secret(text: str) -> str | None:
    """The name of the first detector ``text`` trips, or None when it looks clean."""
    for name, pattern in _PROVIDERS:
        if pattern.search(text):
            return name
    for pattern in _ASSIGNMENTS:
        for match in pattern.finditer(text):
            if _looks_like_secret_value(match.group("value")):
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


def _looks_like_secret_value(value: str) -> bool:
    value = value.strip("'\"`.")
    # Too short, a reference, a flag (`--token --other`) or prose (`--token command-line`).
    if len(value) < 6 or _REFERENCE.match(value) or value.startswith("-") or re.fullmatch(r"[a-z]+(?:-[a-z]+)*", value):
        return False
    # A plain word ("the token is stored in vault") is prose; a secret has digits or symbols or mixed case.
    return bool(re.search(r"[\d\W_]", value)) or value != value.lower()


def _random_looking(token: str) -> bool:
    """Base64 or an API key: digits somewhere, and a word whose letters switch case every couple of characters.

    Identifiers (``RELATIVE_PATH_TO_SYSROOT``), target triples, CamelCase names and hex digests (commit ids,
    content hashes: provenance, not secrets) have long single-case runs, so they pass.
    """
    if not any(c.isdigit() for c in token) or _entropy(token) < 3.5:
        return False
    for word in re.split(r"[/_+=-]", token):
        if len(word) >= 10 and any(c.isupper() for c in word) and any(c.islower() for c in word):
            runs = len(re.findall(r"[A-Z]+|[a-z]+|[0-9]+", word))
            if len(word) / runs < 2.5:
                return True
    return False


def _entropy(token: str) -> float:
    counts = Counter(token)
    return -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
