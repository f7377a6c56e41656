"""Nothing outside :mod:`errand.tasks.events` reads a task event's data by a field's name: a
reader takes the kind's typed reader there (``Committed.of(event).commit``), so a field is
spelled in one place beside its declaration, and an old row is read one tolerant way.

The walk finds ``event.data.get(...)``, ``event.data[...]``, ``"field" in event.data``,
``(event.data or {}).get(...)`` and the same through a name bound to such data
(``data = event.data if ... else {}`` then ``data.get(...)``), in every module of ``src``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "src" / "errand"
DEFINING = SOURCE / "tasks" / "events.py"
# Rows as a migration found them, read at the schema of its own revision.
MIGRATIONS = SOURCE / "migrations"
# ``.data`` of something that is not a task's event, named by the receiver: (module, name, why).
NOT_EVENTS = {
    ("agent/external.py", "said"): "a CLI's stream line as its adapter translated it (errand.agent.cli.Said)",
    ("agent/external.py", "result"): "the CLI's closing line, a Said too",
}


def _data_source(node: ast.AST, bound: set[str]) -> bool:
    """Whether ``node`` is an event's data: ``x.data``, ``data_of(x)``, a name bound to one, or
    ``a or b`` / ``a if c else b`` with one of those as an operand."""
    if isinstance(node, ast.Attribute):
        return node.attr == "data"
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id == "data_of"
    if isinstance(node, ast.Name):
        return node.id in bound
    if isinstance(node, ast.BoolOp):
        return any(_data_source(value, bound) for value in node.values)
    if isinstance(node, ast.IfExp):
        return _data_source(node.body, bound) or _data_source(node.orelse, bound)
    return False


def _receiver(node: ast.AST) -> str | None:
    """The name whose ``.data`` ``node`` reads (``said`` of ``said.data``), where it is one."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Attribute) and inner.attr == "data" and isinstance(inner.value, ast.Name):
            return inner.value.id
    return None


def _bound(scope: ast.AST) -> set[str]:
    names: set[str] = set()
    for _ in range(3):  # a name bound to a name bound to data
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and _data_source(node.value, names):
                names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
            elif isinstance(node, ast.NamedExpr) and _data_source(node.value, names):
                names.add(node.target.id)
    return names


def keyed_reads(source: str) -> Iterator[tuple[int, str, str | None]]:
    """``(line, what, receiver)`` for each read of an event's data by key in ``source``."""
    tree = ast.parse(source)
    scopes = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)]
    found: dict[int, tuple[int, str, str | None]] = {}  # by node: a function's walk sees its nested ones'
    for scope in [tree, *scopes]:
        bound = _bound(scope) if scope is not tree else set()
        for node in ast.walk(scope):
            if isinstance(node, ast.Subscript) and _data_source(node.value, bound):
                found[id(node)] = node.lineno, ast.unparse(node), _receiver(node.value)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                  and _data_source(node.func.value, bound)):
                found[id(node)] = node.lineno, ast.unparse(node), _receiver(node.func.value)
            elif isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops) \
                    and any(_data_source(right, bound) for right in node.comparators):
                found[id(node)] = node.lineno, ast.unparse(node), _receiver(node)
    yield from sorted(found.values())


def _reads() -> list[str]:
    found = set()
    for path in sorted(SOURCE.rglob("*.py")):
        if path == DEFINING or path.is_relative_to(MIGRATIONS):
            continue
        where = path.relative_to(SOURCE).as_posix()
        for line, what, receiver in keyed_reads(path.read_text(encoding="utf-8")):
            if (where, receiver) not in NOT_EVENTS:
                found.add(f"{where}:{line}: {what}")
    return sorted(found)


def test_no_module_but_the_vocabulary_reads_event_data_by_key() -> None:
    assert _reads() == []


def test_each_exemption_is_still_read_that_way() -> None:
    """An exemption nothing needs any more is dropped, so it cannot hide a new read."""
    for where, receiver in NOT_EVENTS:
        assert any(found == receiver for _, _, found in keyed_reads((SOURCE / where).read_text(encoding="utf-8")))


def test_the_walk_sees_each_spelling() -> None:
    spellings = {
        "def f(event):\n    return event.data.get('text')\n": "event.data.get('text')",
        "def f(event):\n    return event.data['text']\n": "event.data['text']",
        "def f(event):\n    return 'input_tokens' in event.data\n": "'input_tokens' in event.data",
        "def f(event):\n    return (event.data or {}).get('reason')\n": "(event.data or {}).get('reason')",
        "def f(e):\n    data = e.data if isinstance(e.data, dict) else {}\n    return data.get('commit')\n":
            "data.get('commit')",
        "def f(e):\n    data = data_of(e)\n    d = data\n    return d['ids']\n": "d['ids']",
        "f = lambda e: e.data.get('x')\n": "e.data.get('x')",
    }
    for source, what in spellings.items():
        assert [found for _, found, _ in keyed_reads(source)] == [what], source


def test_the_walk_lets_typed_readers_and_whole_data_pass() -> None:
    source = ("def f(event, d):\n    x = Committed.of(event).commit\n    y = {**event.data}\n"
              "    z = render(data_of(event))\n    return d.get('k'), x, y, z\n")
    assert list(keyed_reads(source)) == []
