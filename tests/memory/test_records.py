"""The memory layer's values: a provenance checked for what its source needs and described in one
line, a memory as JSON, a recalled memory as the agent reads it, and the project a repository is."""

from __future__ import annotations

from pathlib import Path

import pytest

from errand.memory import InvalidMemory, Provenance, Source, project_key
from errand.memory.records import ArchiveReason, Kind, Memory, Recalled, Status


def test_provenance_needs_what_its_source_names() -> None:
    with pytest.raises(InvalidMemory):
        Provenance(Source.FILE, path="AGENTS.md")
    assert Provenance.file("AGENTS.md", "sha256:" + "ab" * 32).describe() == "AGENTS.md @ abababababab"


@pytest.mark.parametrize(("source", "needs"), [(Source.TASK, "task_id"), (Source.REVIEW, "task_id"),
                                               (Source.FILE, "path, content_hash"), (Source.COMMIT, "commit"),
                                               (Source.MODEL, "task_id")])
def test_each_source_names_what_it_is_missing(source: Source, needs: str) -> None:
    with pytest.raises(InvalidMemory) as caught:
        Provenance(source)
    assert caught.value.code == "invalid_provenance" and caught.value.message == f"a {source} provenance needs {needs}"


def test_a_source_is_read_from_its_name_and_an_unknown_one_refused() -> None:
    assert Provenance("person").source is Source.PERSON  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Provenance("rumour")  # type: ignore[arg-type]


@pytest.mark.parametrize(("provenance", "line"), [
    (Provenance.task("t-1", 4, "test command, exit 0"), "task t-1 event 4 (test command, exit 0)"),
    (Provenance.task("t-1"), "task t-1"),
    (Provenance.review("t-2", "rejected"), "review of task t-2 (rejected)"),
    (Provenance.at_commit("0123456789abcdef0123"), "commit 0123456789ab"),
    (Provenance.person(), "added by a person"),
    (Provenance.person("from the wiki"), "added by a person (from the wiki)"),
    (Provenance.model("t-3", "claude-haiku-4-5", 9), "distilled by claude-haiku-4-5 from task t-3 event 9"),
    (Provenance.file("docs/CONVENTIONS.md", "0f" * 32), "docs/CONVENTIONS.md @ 0f0f0f0f0f0f"),
])
def test_a_provenance_is_described_in_one_line(provenance: Provenance, line: str) -> None:
    assert provenance.describe() == line


def memory(**changes: object) -> Memory:
    values: dict[str, object] = dict(
        id=7, project="/repo/x", kind=Kind.PITFALL, text="add() once subtracted", status=Status.ARCHIVED,
        provenance=Provenance.review("t-2", "rejected"), confidence=0.5, created_at=1.0, updated_at=2.0,
        last_used_at=None, use_count=0, evidence=1, supersedes=None, superseded_by=8,
        archived_reason=ArchiveReason.SUPERSEDED, citations=("calc.py",))
    values.update(changes)
    return Memory(**values)  # type: ignore[arg-type]


def test_a_memory_as_json_is_plain_values_with_its_source_described() -> None:
    saved = memory().to_json()
    assert saved["kind"] == "pitfall" and saved["status"] == "archived" and saved["archived_reason"] == "superseded"
    assert saved["provenance"] == {"source": "review", "task_id": "t-2", "detail": "rejected"}
    assert saved["source"] == "review of task t-2 (rejected)" and saved["citations"] == ["calc.py"]
    assert memory(archived_reason=None).to_json()["archived_reason"] is None


def test_a_recalled_memory_as_the_agent_reads_it_and_a_stale_one_warned() -> None:
    fresh = Recalled(memory(), 0.9)
    assert fresh.render() == ("[memory 7] (pitfall) add() once subtracted — source: review of task t-2 "
                              "(rejected)")
    stale = Recalled(memory(), 0.9, stale=True, stale_reasons=("calc.py is gone", "add() moved"))
    assert stale.render().endswith(" — STALE: calc.py is gone; add() moved; check before relying on it")


def test_project_key_scopes_paths_and_urls(tmp_path: Path) -> None:
    assert project_key(tmp_path) == project_key(f"{tmp_path}/") == str(tmp_path.resolve())
    assert project_key("https://example.org/team/repo.git/") == "https://example.org/team/repo"
    assert project_key("git@example.org:team/repo.git") == "git@example.org:team/repo"


def test_a_project_key_is_the_same_for_a_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert project_key(" ./repo ") == project_key("repo") == str(tmp_path.resolve() / "repo")
    assert project_key("ssh://git@example.org/team/repo.git") == "ssh://git@example.org/team/repo"
