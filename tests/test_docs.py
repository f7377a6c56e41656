"""The repository explains itself: the README is a short guide, the docs site builds strictly,
and no docstring sends a reader to a file the repository does not have."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_LIMIT = 10 * 1024
#: A file name a docstring may point a reader to: a page or a file of the repository.
NAMED_FILE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.(?:md|toml|yml|yaml))\b")


def test_the_readme_is_a_short_guide() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= README_LIMIT
    for section in ("## The two commands", "## Quick start: a sandbox", "## Quick start: a task",
                    "## Quick start: the forge"):
        assert section in readme


def test_every_page_the_readme_links_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)\)", readme)
    assert links
    assert [link for link in links if not link.startswith("http") and not (ROOT / link).exists()] == []


def test_every_docs_page_is_in_the_sites_navigation() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    pages = {str(path.relative_to(ROOT / "docs")) for path in (ROOT / "docs").rglob("*.md")}
    assert sorted(page for page in pages if page not in config) == []


def test_no_docstring_names_a_file_the_repository_does_not_have() -> None:
    missing = []
    for module in sorted((ROOT / "src").rglob("*.py")):
        tree = ast.parse(module.read_text())
        nodes = [tree, *(node for node in ast.walk(tree)
                         if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))]
        for node in nodes:
            for name in NAMED_FILE.findall(ast.get_docstring(node) or ""):
                if not _exists(name):
                    missing.append(f"{module.relative_to(ROOT)}: {name}")
    assert missing == []


#: Documents a project keeps about itself (AGENTS.md, CLAUDE.md and errand.toml are a user's repository's).
PROJECT_DOCUMENTS = frozenset({"DESIGN.md", "README.md", "CONTRIBUTING.md", "CHANGELOG.md", "STYLE.md",
                               "FIELD-NOTES.md", "ARCHITECTURE.md", "mkdocs.yml", "pyproject.toml"})


def _exists(name: str) -> bool:
    """Whether a name a docstring gives, if it is one of this repository's files, is there."""
    own_directories = {path.name for path in ROOT.iterdir() if path.is_dir() and not path.name.startswith(".")}
    if name not in PROJECT_DOCUMENTS and name.split("/")[0] not in own_directories:
        return True
    return (ROOT / name).exists()
