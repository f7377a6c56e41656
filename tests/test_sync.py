"""The blocking API derived from the async one: each kind of member becomes its blocking twin, async
results are wrapped in theirs, and a blocking call from inside errand's own loop is refused."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from typing import Any

import pytest

from errand._sync import run_sync, synchronize


class AsyncPage:
    """A page of a notebook."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def read(self) -> str:
        await asyncio.sleep(0)
        return self.text


class AsyncNotebook:
    """A notebook whose pages are written on an event loop."""

    def __init__(self) -> None:
        self.pages: list[AsyncPage] = []
        self.closed = False
        self.loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    async def open(cls, *texts: str) -> AsyncNotebook:
        notebook = cls()
        for text in texts:
            await notebook.write(text)
        return notebook

    async def write(self, text: str) -> AsyncPage:
        self.loop = asyncio.get_running_loop()
        page = AsyncPage(text)
        self.pages.append(page)
        return page

    async def first(self, count: int) -> list[AsyncPage]:
        return self.pages[:count]

    async def lines(self) -> AsyncIterator[str]:
        for page in self.pages:
            yield page.text

    def count(self) -> int:
        return len(self.pages)

    @property
    def last(self) -> AsyncPage:
        return self.pages[-1]

    async def _hidden(self) -> None: ...

    async def __aenter__(self) -> AsyncNotebook:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.closed = True

    def __aiter__(self) -> AsyncIterator[AsyncPage]:
        return self._pages()

    async def _pages(self) -> AsyncIterator[AsyncPage]:
        for page in self.pages:
            yield page

    async def fail(self) -> None:
        raise KeyError("no such page")


Page: Any = synchronize(AsyncPage, "Page")
Notebook: Any = synchronize(AsyncNotebook, "Notebook")


def test_each_kind_of_member_has_its_blocking_twin() -> None:
    notebook: Any = Notebook.open("one", "two")
    assert type(notebook) is Notebook and isinstance(notebook._async, AsyncNotebook)
    page = notebook.write("three")
    assert type(page) is Page and page.read() == "three"
    assert [p.read() for p in notebook.first(2)] == ["one", "two"]  # a list of async objects, each wrapped
    assert list(notebook.lines()) == ["one", "two", "three"]
    assert notebook.count() == 3 and notebook.last.read() == "three" and type(notebook.last) is Page
    assert [type(p) for p in notebook] == [AsyncPage] * 3  # iteration yields what the async iterator does
    assert [type(p) for p in notebook.pages] == [Page] * 3  # any other attribute: the async one's, wrapped
    with notebook as same:
        assert same is notebook
    assert notebook._async.closed


def test_the_work_runs_on_one_background_loop_not_the_caller_s_thread() -> None:
    first: Any = Notebook.open("one")
    second: Any = Notebook.open("two")
    assert first._async.loop is second._async.loop is not None
    assert first._async.loop.is_running()


def test_private_members_have_no_twin_and_the_docs_and_names_carry_over() -> None:
    assert not hasattr(Notebook, "_hidden") and not hasattr(Notebook, "__aenter__")
    assert Notebook.__doc__ == AsyncNotebook.__doc__ and Notebook.__module__ == __name__
    assert Notebook.write.__name__ == "write"
    assert str(inspect.signature(Notebook.write).return_annotation) == "Page"  # AsyncPage → Page
    assert str(inspect.signature(Notebook.open).return_annotation) == "Notebook"


def test_an_error_of_the_async_side_reaches_the_caller_as_it_was() -> None:
    notebook: Any = Notebook.open()
    with pytest.raises(KeyError, match="no such page"):
        notebook.fail()


def test_a_blocking_call_from_inside_errand_s_own_loop_is_refused() -> None:
    async def inner() -> str:
        return "never"

    async def outer() -> None:
        coroutine = inner()
        with pytest.raises(RuntimeError, match="inside its own event loop"):
            run_sync(coroutine)
        assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED  # closed, not left unawaited

    run_sync(outer())
    assert run_sync(inner()) == "never"
