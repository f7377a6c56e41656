"""An instance as the task layer sees it while it is graded or solved."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from errand.tasks.records import Run, Task
from errand.tasks.round import steps

__all__ = ["InstanceContext"]


@dataclass(frozen=True)
class InstanceContext:
    """An instance as the task layer sees it: its task and run records, its environment, its
    stripped source, and the set-up environment every sandbox of it starts from."""

    task: Task
    run: Run
    environment: Any
    setup: steps.SetUp
    setup_seconds: float
    base_tree: Path | None = None
