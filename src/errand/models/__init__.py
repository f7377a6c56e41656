"""errand.models — see DESIGN.md."""
