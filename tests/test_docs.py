"""The repository explains itself: the README is a short guide, the docs site builds strictly (and
CI's build fails on a broken link), and what the docs and docstrings name is there: each command and
option, Python name and parameter, TOML key, API route, repository file and errand object."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

ROOT = Path(__file__).resolve().parents[1]
README_LIMIT = 10 * 1024
#: A file name a docstring may point a reader to: a page or a file of the repository.
NAMED_FILE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.(?:md|toml|yml|yaml))\b")
#: A path only this repository has: a benchmark, a page, a module (from the repository or from ``src``).
REPOSITORY_FILE = re.compile(r"(?<![\w/.-])((?:benchmarks|docs|src/errand|errand)/[\w./-]*\w)")


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
    for module, docstring in _docstrings():
        missing += [f"{module.relative_to(ROOT)}: {name}" for name in NAMED_FILE.findall(docstring)
                    if not _exists(name)]
        missing += [f"{module.relative_to(ROOT)}: {name}" for name in REPOSITORY_FILE.findall(docstring)
                    if not (ROOT / name).exists() and not (ROOT / "src" / name).exists()]
    assert missing == []


def _docstrings() -> Iterator[tuple[Path, str]]:
    """Every docstring of errand's source: each module's, class's and function's, with its file."""
    for module in sorted((ROOT / "src").rglob("*.py")):
        tree = ast.parse(module.read_text())
        nodes = [tree, *(node for node in ast.walk(tree)
                         if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))]
        for node in nodes:
            yield module, ast.get_docstring(node) or ""


#: Documents a project keeps about itself (AGENTS.md, CLAUDE.md and errand.toml are a user's repository's).
PROJECT_DOCUMENTS = frozenset({"DESIGN.md", "README.md", "CONTRIBUTING.md", "CHANGELOG.md", "STYLE.md",
                               "FIELD-NOTES.md", "ARCHITECTURE.md", "mkdocs.yml", "pyproject.toml"})


def _exists(name: str) -> bool:
    """Whether a name a docstring gives, if it is one of this repository's files, is there."""
    own_directories = {path.name for path in ROOT.iterdir() if path.is_dir() and not path.name.startswith(".")}
    if name not in PROJECT_DOCUMENTS and name.split("/")[0] not in own_directories:
        return True
    return (ROOT / name).exists()


def _pages() -> list[Path]:
    """The pages a reader is given: the README, the site's pages, and the benchmarks' page it includes."""
    return [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks(language: str) -> list[tuple[str, str]]:
    """Each fenced block of ``language`` on a page, with the page's path in the repository."""
    return [(str(page.relative_to(ROOT)), body) for page in _pages() for lang, body in FENCE.findall(page.read_text())
            if lang == language]


def _build(tree: Path) -> subprocess.CompletedProcess[str]:
    """The site built from ``tree`` as CI builds it: scripts/test runs scripts/build-docs."""
    assert "./scripts/build-docs" in (ROOT / "scripts" / "test").read_text()
    for name in (".venv", "src", "benchmarks"):
        (tree / name).symlink_to(ROOT / name)
    shutil.copy(ROOT / "mkdocs.yml", tree)
    return subprocess.run(["bash", str(ROOT / "scripts" / "build-docs"), str(tree / "site")], cwd=tree,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_ci_docs_build_fails_on_a_broken_link_or_anchor(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    with (tmp_path / "docs" / "models.md").open("a") as page:
        page.write("\nSee [the pricing page](pricing.md) and [retries](tasks.md#no-such-section).\n")
    built = _build(tmp_path)
    assert built.returncode != 0
    assert "pricing.md" in built.stderr and "no-such-section" in built.stderr


def test_every_errand_command_the_docs_give_exists_with_its_options() -> None:
    from typer.main import get_command

    from errand.cli.app import app

    root = get_command(app)
    commands = [(page, command) for language in ("sh", "bash", "console") for page, body in _blocks(language)
                for command in _errand_commands(body)]
    assert len(commands) > 50
    wrong = [f"{page}: {' '.join(command)}: {fault}" for page, command in commands
             if (fault := _fault(root, command[1:]))]
    assert wrong == []


def _fault(group: Any, words: list[str]) -> str | None:
    """What is wrong with a command line's words (after ``errand``): a command or an option it lacks."""
    found = group
    while hasattr(found, "commands") and words and not words[0].startswith("-"):
        found, words = found.get_command(typer.Context(found), words[0]), words[1:]  # a lazy group loads
        if found is None:
            return "no such command"
    options = {option for param in found.params for option in (*param.opts, *param.secondary_opts)}
    unknown = [word for word in words if word.startswith("-") and word.split("=")[0] not in options]
    return f"no option {', '.join(unknown)}" if unknown else None


def _errand_commands(script: str) -> list[list[str]]:
    """The errand commands of a shell block: words up to a comment, an end of command or ``--``;
    environment assignments before them and optional ``[...]`` parts dropped."""
    commands = []
    for line in script.replace("\\\n", " ").splitlines():
        line = line.strip().removeprefix("$ ")
        if not re.match(r"(\w+=\S+ )*errand ", line):
            continue
        lexer = shlex.shlex(line.replace("[", "").replace("]", ""), posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        words: list[str] = []
        for word in [*lexer, ";"]:
            if word in {";", "&&", "||", "|"}:
                while words and re.fullmatch(r"\w+=.*", words[0]):
                    words.pop(0)
                if words[:1] == ["errand"]:
                    commands.append(words[:words.index("--")] if "--" in words else words)
                words = []
            else:
                words.append(word)
    return commands


def test_the_docs_python_examples_use_errands_real_names_and_parameters() -> None:
    wrong = []
    for page, body in _blocks("python"):
        tree = ast.parse(body)
        imported = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("errand"):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    if not hasattr(module, alias.name):
                        wrong.append(f"{page}: {node.module} has no {alias.name}")
                    else:
                        imported[alias.asname or alias.name] = getattr(module, alias.name)
        for call in (node for node in ast.walk(tree) if isinstance(node, ast.Call)):
            target = _named(call.func, imported)
            if target is None or not call.keywords:
                continue
            parameters = inspect.signature(target).parameters
            if any(param.kind is param.VAR_KEYWORD for param in parameters.values()):
                continue
            wrong += [f"{page}: {ast.unparse(call.func)}() takes no {keyword.arg}=" for keyword in call.keywords
                      if keyword.arg is not None and keyword.arg not in parameters]
    assert wrong == []


def _named(func: ast.expr, imported: dict[str, Any]) -> Any:
    """What an example calls, when it is an imported name or an attribute of one (``Sandbox.create``)."""
    if isinstance(func, ast.Name):
        return imported.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in imported:
        return getattr(imported[func.value.id], func.attr, None)
    return None


#: A path of this repository a page names in inline code: a benchmark, a script, a test, a module, a page.
REPOSITORY_PATH = re.compile(r"`(?:\./)?((?:benchmarks|scripts|tests|src/errand|docs)/[^`\s…<>*]+)`")


def test_every_repository_file_the_docs_name_exists() -> None:
    packages = "|".join(path.name for path in (ROOT / "src" / "errand").iterdir() if path.is_dir())
    module = re.compile(rf"`((?:{packages})/[\w/]+\.py)`")
    text = {page: re.sub(FENCE, "", page.read_text()) for page in _pages()}
    missing = [f"{page.relative_to(ROOT)}: {path}" for page, body in text.items()
               for path in REPOSITORY_PATH.findall(body) if not (ROOT / path).exists()]
    missing += [f"{page.relative_to(ROOT)}: {path}" for page, body in text.items()
                for path in module.findall(body) if not (ROOT / "src" / "errand" / path).exists()]
    assert missing == []


#: A fully qualified reference to one of errand's objects in a docstring (``:class:`errand.x.Y```).
ERRAND_REFERENCE = re.compile(r":(?:mod|class|func|meth|attr|data|exc|obj):`~?(errand(?:\.\w+)+)`")


def test_every_errand_object_a_docstring_names_exists() -> None:
    unresolved = []
    for module, docstring in _docstrings():
        unresolved += [f"{module.relative_to(ROOT)}: {name}" for name in ERRAND_REFERENCE.findall(docstring)
                       if not _resolves(name)]
    assert unresolved == []


def _resolves(dotted: str) -> bool:
    """Whether ``errand.a.b.C.d`` names a module, or an attribute reached from the longest module in it."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            if not hasattr(found, part) and part not in getattr(found, "__annotations__", {}):
                return False
            found = getattr(found, part, None)
        return True
    return False


def test_the_reference_shows_a_sphinx_role_as_the_name_a_reader_sees() -> None:
    spec = importlib.util.spec_from_file_location("sphinx_roles", ROOT / "docs" / "hooks" / "sphinx_roles.py")
    assert spec is not None and spec.loader is not None
    roles = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(roles)
    assert roles.plain("See :class:`~errand.forge.hosts.gitea.GiteaForge` and :func:`errand.forge.open_forge`, "
                       ":meth:`~Sandbox.exec()`.") == "See `GiteaForge` and `errand.forge.open_forge`, `exec()`."


def test_every_docs_page_has_one_title() -> None:
    titles = {str(page.relative_to(ROOT)): [line for line in FENCE.sub("", page.read_text()).splitlines()
                                           if line.startswith("# ")]
              for page in sorted((ROOT / "docs").rglob("*.md"))}
    assert {page: found for page, found in titles.items() if len(found) != 1} == {}


#: The file each page's TOML examples are written as.
TOML_FILES = {"docs/errand-toml.md": "errand.toml", "docs/environments.md": "errand.toml",
              "docs/models.md": "config.toml", "docs/eval.md": "specs.toml", "docs/egress.md": "config.toml"}


def test_the_docs_toml_examples_are_read_by_errand_as_written(tmp_path: Path) -> None:
    from errand.eval.dataset import load_specs
    from errand.models.catalog import Catalog
    from errand.tasks.round.environment import Environment
    from errand.tasks.round.task_secrets import declared

    examples = _blocks("toml")
    assert sorted({page for page, _ in examples}) == sorted(TOML_FILES)
    for number, (page, body) in enumerate(examples):
        path = tmp_path / str(number) / TOML_FILES[page]
        path.parent.mkdir()
        path.write_text(body)
        if path.name == "errand.toml":
            Environment.load(path.parent)
        elif path.name == "config.toml":
            Catalog.load(path)
            declared(path)
        else:
            load_specs(path)


def test_the_architecture_map_names_only_folders_and_files_that_exist() -> None:
    """Each entry of the map (a folder or module at its indentation) and each file or folder its
    description names, found in that entry's folder, so the map follows the tree when it moves."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    tree = FENCE.findall(page)[0][1]
    parents: dict[int, Path] = {}
    entry = ROOT
    missing = []
    for line in tree.splitlines():
        indent = len(line) - len(line.lstrip())
        names = re.match(r"\s*((?:[\w.]+/)+|[\w.]+\.py(?:, [\w.]+\.py)*)(?:\s{2,}|$)", line)
        if names:
            base = parents.get(indent - 2, ROOT)
            paths = [base / name.strip() for name in names[1].split(",")]
            missing += [str(path.relative_to(ROOT)) for path in paths if not path.exists()]
            entry = paths[0] if names[1].endswith("/") else base
            parents[indent] = entry
            line = line[names.end():]
        for named in re.findall(r"(?<![\w/.])([\w.-]+\.py|(?:[\w-]+/)+)(?![\w/])", line):
            if not (ROOT / named).exists() and not any(entry.rglob(named.rstrip("/"))):
                missing.append(f"{entry.relative_to(ROOT)}: {named}")
    assert len(parents) >= 2
    assert missing == []


@pytest.mark.slow
@pytest.mark.network
def test_the_readmes_sandbox_quick_start_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from errand import Image

    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "test_sum.py").write_text("def test_sum():\n    assert sum([1, 2]) == 3\n")
    monkeypatch.chdir(tmp_path)
    [quick_start] = [body for page, body in _blocks("python") if page == "README.md"]
    names: dict[str, Any] = {}
    exec(compile(quick_start, "README.md", "exec"), names)
    assert "1 passed" in capsys.readouterr().out
    assert isinstance(names["image"], Image)
    assert sorted(path.name for path in (tmp_path / "repo").iterdir()) == ["test_sum.py"]


#: An HTTP route of errand's API the docs name, with its method where they give one
#: (``/api/forge/{github,gitea}/webhook`` names two).
API_ROUTE = re.compile(r"(?:\b(GET|POST|PUT|PATCH|DELETE) )?(?<![\w/])"
                       r"(/api/(?:tasks|sandboxes|memories|forge)(?:[\w/-]|\{[\w,]*\})*)")


def test_every_api_route_the_docs_name_is_served(tmp_path: Path) -> None:
    from errand.server.app import create_app

    served: dict[str, set[str]] = {}
    for path, operations in create_app(database_url=f"sqlite:///{tmp_path / 'tasks.db'}").openapi()["paths"].items():
        served.setdefault(_route(path), set()).update(method.upper() for method in operations)
    named = [(page, method, path) for page in _pages() for method, written in API_ROUTE.findall(page.read_text())
             for path in _expanded(written)]
    assert len(named) > 20
    unserved = [f"{page.relative_to(ROOT)}: {method} {path}" for page, method, path in named
                if _route(path) not in served or (method and method not in served[_route(path)])]
    assert unserved == []


def _expanded(path: str) -> list[str]:
    """A path with its ``{a,b}`` alternatives written out, as a shell expands them."""
    choice = re.search(r"\{(\w+(?:,\w+)+)\}", path)
    if choice is None:
        return [path]
    return [expanded for option in choice[1].split(",")
            for expanded in _expanded(path[:choice.start()] + option + path[choice.end():])]


def _route(path: str) -> str:
    """A route with each parameter written ``{}``: ``/api/tasks/{task_id}``, ``/api/tasks/{id}`` and
    ``/api/tasks/TASK`` are one route."""
    return re.sub(r"/(?:\{[^}/]*\}|[A-Z]+)(?=/|$)", "/{}", path.rstrip("/"))
