from __future__ import annotations

from pathlib import Path

from errand.memory import MemoryStore, sync_instructions
from errand.memory.rules import Activation, parse_rule, rules_for

PROJECT = "/repo/example"

API_RULE = """---
description: How API handlers validate input
globs: src/api/**/*.py, tests/api/**
alwaysApply: false
---

Handlers validate their input with the schema in `src/api/schemas.py`.
"""
ALWAYS_RULE = "---\ndescription: House style\nalwaysApply: true\n---\n\nEvery public function has a docstring.\n"
REQUESTED_RULE = "---\ndescription: How releases are cut\n---\n\nReleases are tagged from the release branch.\n"


def test_front_matter_declares_how_a_rule_applies() -> None:
    activation, body = parse_rule(API_RULE)
    assert activation == Activation("globs", ("src/api/**/*.py", "tests/api/**"))
    assert body.strip().startswith("Handlers validate") and "alwaysApply" not in body
    assert parse_rule(ALWAYS_RULE)[0] == Activation("always")
    assert parse_rule(REQUESTED_RULE)[0] == Activation("requested", description="How releases are cut")
    assert parse_rule("---\n---\nJust text.\n")[0] == Activation("manual")
    assert parse_rule("No front matter.\n") == (None, "No front matter.\n")


def test_rules_and_scoped_instructions_apply_to_the_files_at_hand(lexical_store: MemoryStore, tmp_path: Path) -> None:
    rules = tmp_path / ".cursor" / "rules"
    rules.mkdir(parents=True)
    (rules / "api.mdc").write_text(API_RULE)
    (rules / "style.mdc").write_text(ALWAYS_RULE)
    (rules / "release.mdc").write_text(REQUESTED_RULE)
    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "AGENTS.md").write_text("# Web\n\nComponents live in `web/components/`, one per file.\n")
    report = sync_instructions(lexical_store, PROJECT, tmp_path)
    assert "web/AGENTS.md" in report.files
    texts = {memory.text for memory in lexical_store.list_memories(PROJECT)}
    assert not any("alwaysApply" in text or "description:" in text for text in texts)  # front matter is not a rule

    def given(*paths: str) -> list[str]:
        return sorted(memory.text.split(": ", 1)[-1] for memory in rules_for(lexical_store, PROJECT, paths))

    assert given("src/api/users.py") == ["Every public function has a docstring.",
                                         "Handlers validate their input with the schema in `src/api/schemas.py`."]
    assert given("web/components/button.tsx") == ["Components live in `web/components/`, one per file.",
                                                  "Every public function has a docstring."]
    assert given("README.md") == ["Every public function has a docstring."]
