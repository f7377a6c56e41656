"""No module reaches into another package's private modules: what one package offers another
is what it names in public (``errand.sandbox``'s ``EgressEvent``, ``collect_garbage``, ...)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
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


# The layer map of docs/architecture.md, bottom first: each layer imports only the layers
# beneath it. ``core`` is errand's root modules (errors, settings, the database); the
# migrations sit on top, since they hold every layer's tables.
LAYERS = ("core", "sandbox", "models", "gateway", "memory", "repo", "agent", "tasks", "eval", "forge", "server", "cli",
          "migrations")


def _layer(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "core"


def _graph() -> dict[str, set[str]]:
    """Every errand module and the errand modules it imports, lazily or not. ``from errand
    import _settings`` depends on ``errand._settings``, not on the package's ``__init__``."""
    modules = dict(_modules())
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set(_imported(name, path))
        bases = {target for target in targets if target in modules
                 and not any(other.startswith(target + ".") and other in modules for other in targets)}
        graph[name] = {target for target in bases if target != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                found.append(sorted([*component, node]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycle() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_check_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_layer_imports_a_layer_above_it() -> None:
    upward = sorted((name, target) for name, targets in _graph().items() for target in targets
                    if name != "errand.__main__" and name != "errand"
                    and LAYERS.index(_layer(target)) > LAYERS.index(_layer(name)))
    assert upward == []


def test_the_command_line_loads_what_its_commands_need_at_once_and_no_more() -> None:
    # Every errand command starts with `import errand.cli`; these cost it ~0.3 s of CPU, and each has
    # a user that loads it itself (a search of memories, a sandbox with secrets, a diff on a terminal,
    # a database to upgrade, an errand.toml to read, the server).
    probe = "import sys, errand.cli\nprint(' '.join(sorted({name.split('.')[0] for name in sys.modules})))"
    loaded = set(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                check=True).stdout.split())
    assert "typer" in loaded and "sqlalchemy" in loaded  # the probe sees what is loaded
    assert not loaded & {"numpy", "cryptography", "alembic", "mako", "pygments", "pydantic"}


def test_a_command_line_that_lists_tasks_loads_no_sandbox_round_memory_store_or_other_command_group() -> None:
    # The package faces (errand, errand.sandbox, errand.memory, errand.agent, errand.tasks) import a
    # name when first asked for, and the command groups load when one of their commands runs: before,
    # `import errand.tasks.records` loaded the service, and every command the sandbox's backends.
    probe = ("import sys, errand.cli\nfrom errand.tasks.records import Task\n"
             "from errand.sandbox.config import Resources\nprint(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                check=True).stdout.split())
    assert {"errand.cli.tasks", "errand.tasks.service", "errand.sandbox.config"} <= loaded  # the probe sees
    assert not loaded & {"errand.sandbox.sandbox", "errand.sandbox._backends.gc", "errand.sandbox.image",
                         "errand.memory.store", "errand.tasks.round.steps", "errand.tasks.round.environment",
                         "errand.agent.loop", "errand.agent.seam", "errand.cli.memory", "errand.cli.forge",
                         "errand.cli.eval", "errand.cli.config", "errand.cli.tour"}


def test_a_lazy_face_keeps_what_it_loaded_and_names_what_it_lacks() -> None:
    probe = ("import sys, errand.sandbox as s\nassert 'errand.sandbox.sandbox' not in sys.modules\n"
             "assert {'Sandbox', 'collect_garbage'} <= set(dir(s))\n"  # listed before they are asked for
             "first = s.Sandbox\nassert 'Sandbox' in vars(s) and s.Sandbox is first\n"
             "from errand.sandbox import collect_garbage\nfrom errand.sandbox._backends.gc import collect\n"
             "assert collect_garbage is collect\n"
             # a submodule loaded after the face keeps the face's name for what it holds
             "import errand.memory.retrieve\nfrom errand.memory.distill import DistillResult\n"
             "from errand.memory import distill, retrieve\nassert callable(distill) and callable(retrieve)\n"
             "try:\n    s.Nope\nexcept AttributeError as error:\n    print(error)")
    said = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert said.strip() == "module 'errand.sandbox' has no attribute 'Nope'"


FACES = ("errand", "errand.sandbox", "errand.memory", "errand.agent", "errand.tasks")


def test_a_type_checker_sees_each_lazy_name_and_no_catch_all() -> None:
    """Each name a face imports lazily is imported in its ``TYPE_CHECKING`` block, and its
    ``__getattr__`` is defined only outside it: with one, mypy takes any name as there."""
    for face in FACES:
        path = SOURCE / face.replace(".", "/") / "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        checked = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
        hidden = [node for node in tree.body if isinstance(node, ast.If)
                  and ast.unparse(node.test) == "not TYPE_CHECKING"]
        seen = {alias.asname or alias.name for node in checked for inner in ast.walk(node)
                if isinstance(inner, ast.ImportFrom) for alias in inner.names}
        module = importlib.import_module(face)
        lazy = set(module.__dict__["_face_homes"])
        assert lazy <= seen, f"{face}: {sorted(lazy - seen)} not imported for type checkers"
        assert not any(isinstance(node, ast.Assign) and "__getattr__" in ast.unparse(node) for node in tree.body), face
        assert any("__getattr__" in ast.unparse(node) for node in hidden), face
