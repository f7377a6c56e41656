"""The blocking API, derived from the async one so the two cannot drift apart.

errand's sandbox is written once, with asyncio. ``synchronize(AsyncX)`` makes
a class whose methods run the async ones on one background event loop and
block for the result; async iterators become iterators, async context
managers become context managers, and returned async objects are wrapped in
their own blocking classes. A parity test checks every public name exists on
both sides with the same parameters.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["run_sync", "synchronize"]

T = TypeVar("T")
_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_WRAPPERS: dict[type, type] = {}


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            # The loop thread lives as long as the process: sandboxes started from it
            # die with their parent thread (PR_SET_PDEATHSIG), so it must not exit early.
            thread = threading.Thread(target=loop.run_forever, name="errand-loop", daemon=True)
            thread.start()
            _loop = loop
        return _loop


_ASYNC_NAME = re.compile(r"\bAsync(?=[A-Z])")


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on errand's background loop and wait for its result."""
    loop = _background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coroutine.close()
        raise RuntimeError("errand's blocking API was called from inside its own event loop; "
                           "use the Async classes there")
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


def wrap(value: Any) -> Any:
    """Wrap async objects (and lists of them) in their blocking counterparts."""
    wrapper = _WRAPPERS.get(type(value))
    if wrapper is not None:
        return wrapper(value)
    if isinstance(value, list):
        return [wrap(item) for item in value]
    return value


def synchronize(async_class: type, name: str, doc: str | None = None) -> type:
    """Make the blocking twin of ``async_class`` (registered so results get wrapped)."""
    namespace: dict[str, Any] = {"__doc__": doc or async_class.__doc__, "__module__": async_class.__module__,
                                 "__slots__": ("_async",), "_async_class": async_class}

    def __init__(self: Any, async_object: Any) -> None:
        self._async = async_object

    def __getattr__(self: Any, attribute: str) -> Any:
        return wrap(getattr(self._async, attribute))

    namespace["__init__"] = __init__
    namespace["__getattr__"] = __getattr__
    for attribute, member in _members(async_class).items():
        made = _derive(attribute, member)
        if made is not None:
            namespace[_sync_name(attribute)] = made
    cls = type(name, (), namespace)
    _WRAPPERS[async_class] = cls
    return cls


def _members(async_class: type) -> dict[str, Any]:
    """The class's own members and those it inherits (AsyncSandbox's come mostly from its base)."""
    members: dict[str, Any] = {}
    for klass in reversed(async_class.__mro__[:-1]):  # not object's
        members.update(vars(klass))
    return members


def _sync_name(attribute: str) -> str:
    return {"__aenter__": "__enter__", "__aexit__": "__exit__", "__aiter__": "__iter__"}.get(attribute, attribute)


def _derive(attribute: str, member: Any) -> Any:
    derived = _derive_member(attribute, member)
    target = derived.__func__ if isinstance(derived, classmethod) else derived
    if inspect.isfunction(target):
        _name_sync_types(target, member.__func__ if isinstance(member, classmethod) else member)
    return derived


def _name_sync_types(wrapper: Any, original: Any) -> None:
    """Say the blocking types in the blocking API's signatures: help(Sandbox.create) returns a
    Sandbox, not the AsyncSandbox that functools.wraps copied from the async method."""
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        return
    parameters = [p.replace(annotation=_sync_annotation(p.annotation)) for p in signature.parameters.values()]
    wrapper.__signature__ = signature.replace(parameters=parameters,
                                              return_annotation=_sync_annotation(signature.return_annotation))
    wrapper.__annotations__ = {k: _sync_annotation(v) for k, v in getattr(original, "__annotations__", {}).items()}


def _sync_annotation(annotation: Any) -> Any:
    # Annotations are strings here (postponed evaluation): AsyncSandbox → Sandbox, AsyncIterator → Iterator.
    return _ASYNC_NAME.sub("", annotation) if isinstance(annotation, str) else annotation


def _derive_member(attribute: str, member: Any) -> Any:
    if attribute.startswith("_") and attribute not in ("__aenter__", "__aexit__", "__aiter__"):
        return None
    if isinstance(member, classmethod) and inspect.iscoroutinefunction(member.__func__):
        function = member.__func__

        @functools.wraps(function)
        def class_call(cls: type, *args: Any, **kwargs: Any) -> Any:
            return wrap(run_sync(function(cls._async_class, *args, **kwargs)))  # type: ignore[attr-defined]

        return classmethod(class_call)
    if isinstance(member, property):
        return property(lambda self: wrap(member.fget(self._async)), doc=member.__doc__)  # type: ignore[misc]
    if attribute == "__aenter__":
        return lambda self: wrap(run_sync(self._async.__aenter__())) and self
    if attribute == "__aiter__":
        return _iterate
    if inspect.isasyncgenfunction(member):
        @functools.wraps(member)
        def generate(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            iterator = getattr(self._async, attribute)(*args, **kwargs)
            try:
                while True:
                    try:
                        yield wrap(run_sync(_next(iterator)))
                    except StopAsyncIteration:
                        return
            finally:
                run_sync(iterator.aclose())

        return generate
    if inspect.iscoroutinefunction(member):
        @functools.wraps(member)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            return wrap(run_sync(getattr(self._async, attribute)(*args, **kwargs)))

        return call
    if inspect.isfunction(member):
        @functools.wraps(member)
        def plain(self: Any, *args: Any, **kwargs: Any) -> Any:
            return wrap(getattr(self._async, attribute)(*args, **kwargs))

        return plain
    return None


def _iterate(self: Any) -> Iterator[Any]:
    iterator = self._async.__aiter__()
    while True:
        try:
            yield run_sync(_next(iterator))
        except StopAsyncIteration:
            return


async def _next(iterator: Any) -> Any:
    return await iterator.__anext__()


_unused: Callable[..., Any] = wrap
