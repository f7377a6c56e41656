"""The components `scripts/setup` installs that some tests need: PostgreSQL, Temporal, Chromium, runsc.

A test names what it needs with ``@pytest.mark.needs("chromium")`` (or a fixture calls
:func:`require`). Where the component is missing the test skips on a developer's machine,
but under CI (``CI=true``) the setup command has just run, so a missing component is a
broken install: there the test fails, and a broken install cannot pass green.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")


def _chromium() -> str | None:
    if not CHROMIUM.exists():
        return f"Debian's chromium is not installed ({CHROMIUM}); `scripts/setup` installs it"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed; `scripts/setup` installs errand's dev dependencies"
    return None


def _runsc() -> str | None:
    return None if shutil.which("runsc") else "runsc (gVisor) is not installed; `scripts/setup` installs it"


def _postgresql() -> str | None:
    import postgres

    return postgres.missing()


def _temporal() -> str | None:
    import temporal

    return temporal.missing()


#: Each component the setup command installs, and how to tell why it cannot be used here (None: it can).
COMPONENTS: dict[str, Callable[[], str | None]] = {
    "postgresql": _postgresql, "temporal": _temporal, "chromium": _chromium, "runsc": _runsc}


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1")


def missing(component: str) -> str | None:
    """Why ``component`` cannot be used here (None: it can)."""
    return COMPONENTS[component]()


def require(component: str) -> None:
    """Skip the running test if ``component`` is missing here; under CI, fail it instead."""
    reason = missing(component)
    if reason is None:
        return
    if under_ci():
        pytest.fail(f"{reason} (under CI the setup command installs it: the install is broken)", pytrace=False)
    pytest.skip(reason)


def needs(*components: str) -> pytest.MarkDecorator:
    """The mark of a test that needs ``components`` (checked when the test is set up)."""
    unknown = set(components) - COMPONENTS.keys()
    if unknown:
        raise ValueError(f"unknown components {sorted(unknown)}; known: {sorted(COMPONENTS)}")
    return pytest.mark.needs(*components)


def check(item: pytest.Item) -> None:
    """Require each component the test's ``needs`` marks name (as the test is set up)."""
    for mark in item.iter_markers("needs"):
        for component in mark.args:
            require(component)


def broken() -> dict[str, str]:
    """Each component missing here, and why."""
    return {name: why for name in COMPONENTS if (why := missing(name)) is not None}
