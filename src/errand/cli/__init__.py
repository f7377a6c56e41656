"""errand's command line: every ``errand ...`` command, a thin face over the Python API.

``app`` is the root (the sandbox commands and the process-level ones: ``serve``, ``gc``,
``demo``, ``tour``); each other module adds one group: :mod:`~errand.cli.tasks` the task
commands (``run``, ``ls``, ``show``, ``accept``...), :mod:`~errand.cli.worker` the background
worker, :mod:`~errand.cli.memory`, :mod:`~errand.cli.eval` and :mod:`~errand.cli.forge` theirs;
:mod:`~errand.cli.events` words a task's events for a terminal. None of them holds a rule of
its own: what a command does is the layer's, the face only parses, calls and prints.
"""

from errand.cli.app import app, main

__all__ = ["app", "main"]
