from __future__ import annotations

from pathlib import Path

from errand.memory import MemoryStore, Provenance, retrieve
from errand.memory.citations import TreeIndex, check, extract
from errand.memory.ingest import passages

PROJECT = "/repo/example"


def tree(root: Path, files: dict[str, str]) -> TreeIndex:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return TreeIndex(root)


def test_a_cited_line_is_kept_with_its_file() -> None:
    assert extract("`load_config` at src/app/config.py:42 raises on an empty file.") == (
        "file:src/app/config.py", "line:src/app/config.py:42", "symbol:load_config")


def test_a_changed_line_makes_the_memory_stale(tmp_path: Path) -> None:
    code = "import os\n\n\ndef load_config(path):\n    return open(path).read()\n"
    index = tree(tmp_path, {"src/config.py": code})
    citations = extract("`load_config` at src/config.py:4 reads the whole file.")
    assert check(citations, index) == ()
    moved = tree(tmp_path / "after", {"src/config.py": "import os\n" + "\n" * 20 + code})
    assert check(citations, moved) == ("cites src/config.py:4, where load_config no longer is",)
    short = tree(tmp_path / "short", {"src/config.py": "x = 1\n"})
    assert check(citations, short)[0] == "cites src/config.py:4, but src/config.py has 1 lines"


def test_symbols_are_looked_for_in_code_files_only(tmp_path: Path) -> None:
    index = tree(tmp_path, {"CHANGELOG.md": "- Removed `open_store`; use `connect_store`.\n",
                            "src/store.py": "def connect_store():\n    pass\n"})
    assert check(extract("Call `open_store()` first."), index) == (
        "cites open_store, which no code file in the tree mentions",)
    assert check(extract("Call `connect_store()` first."), index) == ()


def test_product_names_and_file_names_are_not_mistaken() -> None:
    assert extract("The site needs Node.js 20 and Vue.js.") == ()
    assert extract("Settings are in `settings.toml`; `Gruntfile.js` runs the build.") == (
        "file:settings.toml", "file:Gruntfile.js")


def test_retrieval_flags_a_memory_whose_line_moved(lexical_store: MemoryStore, tmp_path: Path) -> None:
    tree(tmp_path, {"src/config.py": "\n" * 30 + "def load_config(path):\n    pass\n"})
    lexical_store.add(PROJECT, "`load_config` in src/config.py:2 reads the config file.", kind="fact",
                      provenance=Provenance.person())
    [found] = retrieve(lexical_store, PROJECT, "how is the config file read", k=1, repo_dir=tmp_path)
    assert found.stale and found.stale_reasons == ("cites src/config.py:2, where load_config no longer is",)


def test_a_fenced_command_stays_with_its_lead_in() -> None:
    text = "# Testing\n\nRun the tests with:\n\n```sh\nmake test\n```\n\nLint with `ruff check`.\n"
    assert passages(text) == ["Testing: Run the tests with: `make test`", "Testing: Lint with `ruff check`."]
