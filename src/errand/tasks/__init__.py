"""errand.tasks — see DESIGN.md."""
