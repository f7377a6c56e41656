"""Revisions, oldest first; each is frozen once released."""
