"""The type stub of the blocking API says what the generated classes really do."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import errand.sandbox as sandbox_package
from errand.sandbox import AsyncFiles, AsyncProcess, AsyncSandbox, AsyncStream, AsyncWriter

STUB = Path(sandbox_package.__file__).with_name("_blocking_types.pyi")
PAIRS = {"Sandbox": AsyncSandbox, "Process": AsyncProcess, "Files": AsyncFiles, "Stream": AsyncStream,
         "Writer": AsyncWriter}
ALIASES = {"__enter__": "__aenter__", "__exit__": "__aexit__", "__iter__": "__aiter__"}


def _stub_methods() -> dict[str, dict[str, list[str]]]:
    tree = ast.parse(STUB.read_text())
    classes = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = {
                item.name: [a.arg for a in (*item.args.posonlyargs, *item.args.args,
                                            *([item.args.vararg] if item.args.vararg else []),
                                            *item.args.kwonlyargs)]
                for item in node.body if isinstance(item, ast.FunctionDef)}
    return classes


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_stub_matches_the_async_class(name: str) -> None:
    stub = _stub_methods()[name]
    async_class = PAIRS[name]
    public = {attr for attr, member in inspect.getmembers_static(async_class) if not attr.startswith("_")
              and (inspect.isfunction(member) or isinstance(member, classmethod | property))}
    assert {ALIASES.get(method, method) for method in stub} >= public, "stub lacks methods"
    for method, parameters in stub.items():
        member = inspect.getattr_static(async_class, ALIASES.get(method, method))
        function = member.__func__ if isinstance(member, classmethod) else (
            member.fget if isinstance(member, property) else member)
        expected = list(inspect.signature(function).parameters)
        if method == "__exit__":
            continue  # (*exc) in both, named differently by convention
        assert parameters == expected, f"{name}.{method}: stub {parameters} != {expected}"
