"""Asking the host's package tools for their settings, bounded in time.

A tool that hangs (a configuration on a stalled network mount, a wrapper
waiting for input) must not hang the task or build that asked: the question
ends after ``TIMEOUT`` seconds with an error naming the tool and the command.
"""

from __future__ import annotations

import subprocess

from errand.errors import ConfigError

__all__ = ["TIMEOUT", "ask"]

TIMEOUT = 60.0


def ask(argv: list[str], tool: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` and return what it printed; raise ConfigError if it takes over ``TIMEOUT``."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"reading the host's {tool} settings took over {TIMEOUT:g} s and was stopped"
                          f" ({argv[0]} {argv[1] if len(argv) > 1 else ''}…); check that {tool} runs"
                          " on this machine", code="registry_settings_unreadable") from None
