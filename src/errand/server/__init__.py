"""errand.server: the HTTP API, live events, webhooks and the web review UI (a face over errand.tasks)."""
