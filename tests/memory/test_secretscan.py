from __future__ import annotations

import time

import pytest

from errand.memory import SecretRefused, check_no_secret
from errand.memory.secretscan import find_secret

# Every example is made up: these are the formats, not anybody's keys.
SECRETS = [
    ("aws_access_key", "Deploy with AKIAIOSFODNN7EXAMPLE as the key id."),
    ("github_token", "token: ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"),
    ("github_token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU"),
    ("anthropic_key", "ANTHROPIC=sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345"),
    ("openai_key", "use sk-proj-abcdefghijklmnopqrstuvwx12 for the tests"),
    ("slack_token", "xoxb-123456789012-abcdefghijkl"),
    ("private_key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"),
    ("jwt", "Authorization uses eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N"),
    ("url_credentials", "clone https://bob:s3cretpw@git.example.org/team/repo.git"),
    ("url_credentials", "The cache is at redis://:s3cretpw@cache.internal:6379/0 in staging."),
    ("slack_webhook", "CI posts to https://hooks.slack.com/services/T0ABC1DEF/B0GHI2JKL/abcdEFGHijklMNOPqrstUVWX"),
    ("assigned_secret", 'password = "correct-horse-9"'),
    ("assigned_secret", "export API_TOKEN=abcd1234efgh5678"),
    ("assigned_secret", "mysql --password Tr0ub4dor&3 -u root"),
    ("assigned_secret", "the password is Hunter22"),
    ("high_entropy_string", "use wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY there"),
    ("high_entropy_string", "Q2hhbmdlTWUxMjNBYmNEZWZHaGlKa2xNbk9wUXJTdA"),
]

CLEAN = [
    "The token lives in $GITHUB_TOKEN; never paste it.",
    "Log in with `cargo login --token $CARGO_TOKEN`.",
    "Set the password with --password <your password>.",
    "The password is stored in the team vault.",
    "Can be overridden with the --token command-line option.",
    "Fixed in commit 37343f4a4d4ed7ad0891cb79e8eb25acf43fb821.",
    "Content hash sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08.",
    "Build for x86_64-unknown-linux-gnu with RELATIVE_PATH_TO_SYSROOT/lib/rustlib/x86_64-unknown-linux-gnu/lib.",
    "The rust_2024_guarded_string_incompatible_syntax lint fires on `#\"foo\"#`.",
    "Authors are listed in the authors field of Cargo.toml.",
    # A lockfile's subresource-integrity digest of a published package.
    '"integrity": "sha512-K8fR3b0zQ2mVx7Lw9pN1yT6uJ4hG5sD8aF2kE7cX0vB3nM9qW1rT6yU4iO8pL5jH2gF7dS0aZ3xC6vB9nM1qWe=="',
    # Base64 test fixtures: readable text, and a PNG's first bytes.
    "The decoder test expects `VGhlIHF1aWNrIGJyb3duIGZveCBqdW1wcyBvdmVyIDEzIGxhenkgZG9ncw==` to decode.",
    "tests/fixtures/pixel.b64 holds iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk",
    "Hosts behind the proxy are redis://cache.internal:6379 and https://ci.example.org/builds/42.",
]


@pytest.mark.parametrize(("detector", "text"), SECRETS)
def test_secrets_are_found(detector: str, text: str) -> None:
    assert find_secret(text) == detector


@pytest.mark.parametrize("text", CLEAN)
def test_prose_about_secrets_is_not_a_secret(text: str) -> None:
    assert find_secret(text) is None


def test_the_refusal_names_the_detector_not_the_secret() -> None:
    with pytest.raises(SecretRefused) as refused:
        check_no_secret("use sk-proj-abcdefghijklmnopqrstuvwx12")
    assert refused.value.detector == "openai_key" and refused.value.code == "secret_refused"
    assert "abcdefghij" not in refused.value.message and "environment variable" in refused.value.message


# Inputs built to make a backtracking scanner take quadratic (or worse) time: long runs of what one
# detector starts with and never finishes.
ADVERSARIAL_UNITS = ["pwd-", "--pwd-", "eyJ-", "a", "a.", "+a", "x://", "x://:", "a:a", "ghp_", "sk-a", "AKIA",
                     "pwd=${AB} ", "password is x ", "--", "-", " ", "=a", "hooks.slack.com/services/",
                     "aB3dE", "ABCDEFGHIJKLMNOPabcdefghijklmnop0123 "]


@pytest.mark.parametrize("unit", ADVERSARIAL_UNITS)
def test_the_scan_takes_linear_time_on_adversarial_input(unit: str) -> None:
    text = (unit * (100_000 // len(unit) + 1))[:100_000]
    # A bound no load reaches and no backtracking scanner meets: the backtracking one took 41 s on
    # 4,000 characters, and grows faster than the square of the length; a linear one takes under 50 ms
    # on 100,000 on a quiet machine. The best of three runs, as the machine is shared.
    assert min(_seconds(text) for _ in range(3)) < 2.0


def test_the_issue_example_is_quick() -> None:
    assert _seconds(("pwd-" * 1000)[:4000]) < 1.0  # the backtracking scanner: 41 s


def test_a_long_run_of_names_still_finds_the_assignment_at_its_end() -> None:
    assert find_secret("pwd-" * 5000 + "password=Tr0ub4dor3x") == "assigned_secret"


def _seconds(text: str) -> float:
    started = time.perf_counter()
    find_secret(text)
    return time.perf_counter() - started
