"""errand.repo — see DESIGN.md."""
