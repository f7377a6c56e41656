"""Alembic migrations of the task store, run in code by :meth:`errand.tasks.store.tasks.TaskStore.open`."""
