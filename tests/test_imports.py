"""No module reaches into another package's private modules: what one package offers another
is what it names in public (``errand.sandbox``'s ``EgressEvent``, ``collect_garbage``, ...)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src"


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted((SOURCE / "errand").rglob("*.py")):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _imported(name: str, path: Path) -> Iterator[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _private_owner(target: str) -> str | None:
    """The package a private name belongs to (``errand.sandbox`` for ``errand.sandbox._gc``)."""
    parts = target.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index])
    return None


def test_no_module_imports_a_private_module_of_another_package() -> None:
    reached = sorted({(name, target) for name, path in _modules() for target in _imported(name, path)
                      if target.startswith("errand") and (owner := _private_owner(target)) is not None
                      and name != owner and not name.startswith(owner + ".")})
    assert reached == []


def test_the_walk_sees_a_reach_around() -> None:
    """The check above would catch one: a private module of another package is named."""
    assert _private_owner("errand.sandbox._gc") == "errand.sandbox"
    assert _private_owner("errand.sandbox.image") is None
