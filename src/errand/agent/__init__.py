"""errand.agent — see DESIGN.md."""
