"""errand.sandbox's public names, pinned: adding or removing one is a decision, made here."""

from __future__ import annotations

import errand.sandbox

PUBLIC = [
    "GATEWAY_URL",
    "AsyncFiles",
    "AsyncProcess",
    "AsyncSandbox",
    "AsyncStream",
    "AsyncWriter",
    "EgressEvent",
    "EgressLedger",
    "ExecResult",
    "FileInfo",
    "Files",
    "GcReport",
    "Image",
    "Mount",
    "Network",
    "Process",
    "Resources",
    "Sandbox",
    "SandboxInfo",
    "SandboxUsage",
    "Secret",
    "Stream",
    "Writer",
    "collect_garbage",
]


def test_the_public_names_are_exactly_these() -> None:
    assert errand.sandbox.__all__ == PUBLIC


def test_every_public_name_is_there_and_none_is_a_module() -> None:
    for name in PUBLIC:
        value = getattr(errand.sandbox, name)
        assert not isinstance(value, type(errand.sandbox)), name
