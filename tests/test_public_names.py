"""errand's public names, pinned: each package's ``__all__`` is exactly this list.

A name added, renamed or dropped fails here, so a change to the public API is a
change to this file too, made on purpose and seen in review. (``errand.sandbox``'s
names are pinned beside its tests.)"""

from __future__ import annotations

import importlib

import pytest

PUBLIC: dict[str, list[str]] = {
    "errand": [
        "AsyncProcess", "AsyncSandbox", "BackendUnavailable", "ConfigError", "ErrandError", "ExecResult",
        "ExecTimeout", "FileInfo", "FilesError", "Image", "ImageBuildError", "Mount", "Network", "Process",
        "Resources", "Sandbox", "SandboxError", "SandboxNotFound", "SandboxTerminated", "Secret", "__version__",
    ],
    "errand.errors": [
        "BackendUnavailable", "ConfigError", "ErrandError", "ExecTimeout", "FilesError", "ImageBuildError",
        "SandboxError", "SandboxNotFound", "SandboxTerminated",
    ],
    "errand.agent": [
        "Agent", "AgentConfig", "AgentHooks", "AgentResult", "Budgets", "EventHandler", "ExitStatus", "Spent",
        "TOOLS", "ToolRegistry", "ToolResult", "Workspace", "run_tool",
    ],
    "errand.models": [
        "AnthropicModel", "CONTEXT_LENGTH_EXCEEDED", "Catalog", "Message", "Model", "ModelEndpoint",
        "ModelError", "ModelProfile", "OpenAIModel", "PROVIDERS", "Pricing", "Reply", "Role", "ScriptedModel",
        "Tool", "ToolCall", "Usage", "get_model", "open_model", "profile_for",
    ],
    "errand.gateway": [
        "Budget", "Call", "Gateway", "GatewayError", "Grant", "PROTOCOLS", "Protocol", "Upstream",
    ],
    "errand.memory": [
        "ArchiveReason", "DistillResult", "E5Embedder", "Embedder", "InvalidMemory", "Kind", "Memory",
        "MemoryNotFound", "MemoryStore", "MemoryStoreError", "Provenance", "Recalled", "SecretRefused",
        "Source", "Status", "SyncReport", "Weights", "check_no_secret", "default_embedder", "distill",
        "observe_command", "observe_fix", "observe_followup", "observe_review", "project_key", "retrieve",
        "sync_instructions",
    ],
    "errand.repo": [
        "Diff", "DiffStats", "FileChange", "RepoError", "WorkingCopy", "accept", "branch_name", "diff_tree",
        "run_git", "slugify",
    ],
    "errand.tasks": [
        "ACTIVE", "Environment", "Event", "Evidence", "FINAL", "LineComment", "NeedsConfirmation", "Review", "Run",
        "RunState", "Side", "Task", "TaskApi", "TaskError", "TaskNotFound", "TaskService", "TaskState", "TaskStore",
        "TestRun", "Verdict",
    ],
    "errand.forge": [
        "Forge", "ForgeError", "ForgeSettings", "GitHubForge", "IssueRef", "KINDS", "looks_like_issue_ref",
        "open_forge", "open_github",
    ],
    "errand.cli": [
        "app", "main",
    ],
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_the_public_names_are_exactly_the_pinned_ones(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == PUBLIC[package]
    assert len(module.__all__) == len(set(module.__all__))


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_every_public_name_is_there(package: str) -> None:
    module = importlib.import_module(package)
    assert [name for name in module.__all__ if not hasattr(module, name)] == []


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_every_public_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"
