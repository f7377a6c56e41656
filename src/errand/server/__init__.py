"""errand.server — see DESIGN.md."""
