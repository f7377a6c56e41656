"""errand.memory — see DESIGN.md."""
