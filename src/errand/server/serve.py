"""``errand serve``: the application under uvicorn, on loopback unless a token guards it."""

from __future__ import annotations

import logging
import sys

import uvicorn

from errand.server.app import create_app
from errand.server.config import ServerConfig

__all__ = ["serve"]


def serve(config: ServerConfig, *, database_url: str | None = None, log_level: str = "info") -> None:
    """Serve until SIGINT or SIGTERM; then the engine stops cleanly and its runs are requeued."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    app = create_app(config, database_url=database_url)
    host = f"[{config.host}]" if ":" in config.host else config.host
    guard = "" if config.token is None else " (token required)"
    engine = f", running tasks {config.concurrency} at a time" if config.run_engine else ""
    print(f"errand serve: http://{host}:{config.port}{guard}{engine}", file=sys.stderr, flush=True)
    uvicorn.run(app, host=config.host, port=config.port, log_level=log_level, access_log=False,
                timeout_graceful_shutdown=10, server_header=False)
