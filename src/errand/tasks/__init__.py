"""errand.tasks: task records, their lifecycle, the store, the round every engine runs, and the engines."""
