from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from errand.cli import app

runner = CliRunner()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ERRAND_DATABASE_URL", f"sqlite:///{tmp_path / 'errand.db'}")
    monkeypatch.delenv("ERRAND_DB", raising=False)
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def memory(repo: Path, *args: str) -> Result:
    return runner.invoke(app, ["memory", *args, *(["--repo", str(repo)] if args[0] in REPO_COMMANDS else [])])


REPO_COMMANDS = {"ls", "add", "sync", "search", "export", "backfill"}


def test_add_list_show_edit_and_remove(repo: Path) -> None:
    added = memory(repo, "add", "Run the tests with `pytest -q`.", "--kind", "command")
    assert added.exit_code == 0, added.output
    memory_id = added.output.split("\t")[0]
    merged = memory(repo, "add", "run the tests with pytest -q")
    assert "merged into an existing memory" in merged.output

    listed = memory(repo, "ls", "--json")
    (row,) = json.loads(listed.output)
    assert (row["id"], row["kind"], row["status"], row["source"], row["evidence"]) == \
        (int(memory_id), "command", "active", "added by a person", 2)
    assert "pytest -q" in memory(repo, "ls").output

    edited = memory(repo, "edit", memory_id, "--text", "Run the tests with `pytest -q -x`.")
    assert edited.exit_code == 0 and "-x" in edited.output
    shown = memory(repo, "show", memory_id)
    assert "text            Run the tests with `pytest -q -x`." in shown.output
    assert json.loads(memory(repo, "show", memory_id, "--json").output)["text"].endswith("-x`.")

    assert memory(repo, "rm", memory_id).exit_code == 0
    gone = memory(repo, "show", memory_id)
    assert gone.exit_code == 1 and f"no memory has id {memory_id}" in gone.output


def test_a_memory_scoped_to_files_says_so(repo: Path) -> None:
    added = memory(repo, "add", "Handlers log the request id.", "--path", "src/api/**", "--path", "src/web/*.py")
    assert added.exit_code == 0, added.output
    (row,) = json.loads(memory(repo, "ls", "--json").output)
    assert row["source"] == "added by a person (rule: globs src/api/**, src/web/*.py)"
    assert memory(repo, "add", "Elsewhere.", "--path", "../outside/**").exit_code == 2
    assert memory(repo, "add", "Elsewhere.", "--path", "a,b").exit_code == 2


def test_approve_reject_and_archive(repo: Path) -> None:
    first = memory(repo, "add", "Prefer dataclasses over dicts for records.", "--proposed").output.split("\t")[0]
    second = memory(repo, "add", "Name branches after the ticket.", "--proposed").output.split("\t")[0]
    assert "\tactive\t" in memory(repo, "approve", first).output
    assert "\tarchived\t" in memory(repo, "reject", second).output
    again = memory(repo, "reject", first)
    assert again.exit_code == 2 and "only a proposed memory" in again.output
    assert "\tarchived\t" in memory(repo, "rm", "--archive", first).output
    statuses = {row["id"]: row["archived_reason"] for row in json.loads(memory(repo, "ls", "--json").output)}
    assert statuses == {int(first): "archived", int(second): "rejected"}


def test_a_secret_is_refused_with_exit_2(repo: Path) -> None:
    refused = memory(repo, "add", "export GITHUB_TOKEN=ghp_0123456789abcdefghijABCDEFGHIJ012345")
    assert refused.exit_code == 2
    assert "looks like it contains a secret" in refused.output and "ghp_" not in refused.output
    assert json.loads(memory(repo, "ls", "--json").output) == []


def test_text_that_is_not_valid_unicode_is_refused_with_a_message(repo: Path) -> None:
    # A byte that is not UTF-8 in an argument reaches Python as a lone surrogate.
    refused = memory(repo, "add", "Run the tests with caf\udce9 mode.")
    assert refused.exit_code == 2 and "broken Unicode" in refused.output
    assert json.loads(memory(repo, "ls", "--json").output) == []


def test_sync_and_search(repo: Path) -> None:
    (repo / "AGENTS.md").write_text("## Testing\n\nRun `make test` before every commit.\n")
    synced = memory(repo, "sync")
    assert synced.exit_code == 0 and "1 added" in synced.output
    found = memory(repo, "search", "how to run the tests", "--json")
    (hit,) = json.loads(found.output)
    assert hit["text"] == "Testing: Run `make test` before every commit." and hit["source"].startswith("AGENTS.md @")
    assert hit["stale"] is False


def test_projects_are_separate(repo: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    memory(repo, "add", "This one belongs to the first repository.")
    assert json.loads(memory(other, "ls", "--json").output) == []
    assert len(json.loads(runner.invoke(app, ["memory", "ls", "--all", "--json"]).output)) == 1


def test_export_writes_the_approved_memories_into_agents_md_as_a_diff(repo: Path) -> None:
    (repo / "AGENTS.md").write_text("# Agents\n\nUse `make check` before pushing.\n")
    assert memory(repo, "sync").exit_code == 0
    memory(repo, "add", "Run the tests with `pytest -q`.", "--kind", "command")
    memory(repo, "add", "Never commit generated files.", "--kind", "pitfall")
    memory(repo, "add", "A guess nobody approved yet.", "--proposed")
    shown = memory(repo, "export", "--print")
    assert shown.exit_code == 0 and "+++ b/AGENTS.md" in shown.output
    assert "+- Run the tests with `pytest -q`." in shown.output and "+### Pitfalls" in shown.output
    assert "A guess nobody approved yet" not in shown.output  # only approved (active) memories
    assert "Use `make check`" not in shown.output.replace(" Use `make check`", "")  # file memories stay out
    assert (repo / "AGENTS.md").read_text() == "# Agents\n\nUse `make check` before pushing.\n"  # a diff only
    assert memory(repo, "export", "--write").exit_code == 0
    written = (repo / "AGENTS.md").read_text()
    assert written.startswith("# Agents\n\nUse `make check` before pushing.\n\n<!-- errand:memories:begin")
    assert "already holds every approved memory" in memory(repo, "export", "--print").output
    assert "0 added" in memory(repo, "sync").output  # the section is not read back as instructions
    assert memory(repo, "export", "--file", "../outside.md").exit_code == 2


def test_a_directory_in_no_repository_is_refused_not_made_a_project(tmp_path: Path, repo: Path) -> None:
    outside = tmp_path / "notes"
    outside.mkdir()
    for args in (["add", "Use ruff"], ["ls"], ["search", "ruff"], ["sync"]):
        refused = runner.invoke(app, ["memory", *args, "--repo", str(outside)])
        assert refused.exit_code == 2, (args, refused.output)
        assert f"{outside} is not in a git repository; memories belong to a repository" in refused.output
    assert json.loads(memory(repo, "ls", "--json").output) == []
    assert json.loads(runner.invoke(app, ["memory", "ls", "--all", "--json"]).output) == []


def test_an_empty_list_says_so_and_how_to_fill_it(repo: Path) -> None:
    listed = memory(repo, "ls")
    assert listed.exit_code == 0
    assert f"no memories for {repo.resolve()} yet; `errand memory add TEXT` adds one" in listed.output


def test_a_subdirectory_is_its_repository_s_project(repo: Path) -> None:
    (repo / "src").mkdir()
    memory(repo, "add", "Run the tests with `pytest -q`.")
    listed = runner.invoke(app, ["memory", "ls", "--json", "--repo", str(repo / "src")])
    assert [row["project"] for row in json.loads(listed.output)] == [str(repo.resolve())]


def test_the_old_database_variable_still_works_and_says_it_is_going(tmp_path: Path, repo: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ERRAND_DATABASE_URL")
    monkeypatch.setenv("ERRAND_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ERRAND_DB", f"sqlite:///{tmp_path / 'old.db'}")
    added = memory(repo, "add", "Use ruff, not black")
    assert added.exit_code == 0 and "ERRAND_DB is deprecated; set ERRAND_DATABASE_URL" in added.output
    assert (tmp_path / "old.db").exists() and not (tmp_path / "home" / "errand.db").exists()
    monkeypatch.setenv("ERRAND_DATABASE_URL", f"sqlite:///{tmp_path / 'old.db'}")
    listed = memory(repo, "ls", "--json")
    assert "deprecated" not in listed.output and json.loads(listed.output)[0]["text"] == "Use ruff, not black"


def test_backfill_embeds_the_words_of_memories_stored_without_an_embedder(repo: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_EMBEDDER", "none")
    assert memory(repo, "add", "Releases are cut from the main branch.").exit_code == 0
    monkeypatch.delenv("ERRAND_EMBEDDER")
    filled = memory(repo, "backfill")
    assert filled.exit_code == 0, filled.output
    assert "repo: 1 memory embedded" in filled.output and "7 of 7 new words embedded" in filled.output
    again = memory(repo, "backfill")
    assert "0 memories embedded" in again.output and "new words" not in again.output
