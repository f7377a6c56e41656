from __future__ import annotations

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
