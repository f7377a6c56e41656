"""Errors of the memory layer, beneath :class:`errand.errors.ErrandError`::

    ErrandError
    └── MemoryStoreError         a memory could not be stored or changed as asked; nothing changed
        ├── MemoryNotFound       no memory has that id
        ├── InvalidMemory        the memory itself was rejected: empty or oversized text, unknown kind,
        │                        a status move the lifecycle does not allow
        └── SecretRefused        the text looks like it holds a secret (key, token, password)

Branch on the class or on ``.code``, never on the message. (The layer's base is
not called ``MemoryError``: that name is Python's own out-of-memory error.)
"""

from __future__ import annotations

from errand.errors import ErrandError

__all__ = ["InvalidMemory", "MemoryNotFound", "MemoryStoreError", "SecretRefused"]


class MemoryStoreError(ErrandError):
    """An error about one memory, named by ``memory_id`` when there is one."""

    code = "memory_error"

    def __init__(self, message: str, *, memory_id: int | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.memory_id = memory_id


class MemoryNotFound(MemoryStoreError):
    code = "memory_not_found"


class InvalidMemory(MemoryStoreError):
    code = "invalid_memory"


class SecretRefused(MemoryStoreError):
    """The text matched the secret detector ``detector``; the text itself is never echoed back."""

    code = "secret_refused"

    def __init__(self, message: str, *, detector: str, memory_id: int | None = None) -> None:
        super().__init__(message, memory_id=memory_id)
        self.detector = detector
