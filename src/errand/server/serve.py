"""``errand serve``: the application under uvicorn, on loopback unless a token guards it."""

from __future__ import annotations

import errno
import logging
import socket
import sys

import uvicorn

from errand.errors import ConfigError
from errand.server.app import create_app
from errand.server.config import ServerConfig

__all__ = ["serve"]


def serve(config: ServerConfig, *, database_url: str | None = None, log_level: str = "info",
          listening: socket.socket | None = None) -> None:
    """Serve until SIGINT or SIGTERM; then the engine stops cleanly and its runs are requeued.

    The listening socket is bound before anything else starts (or given, bound by :func:`bind`
    before the caller waited for its store), so a taken port is one clear error (``port_taken``)
    and no engine or store is touched. What the engine does is said when it has started (or been
    refused), not promised before."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    listening = listening if listening is not None else bind(config.host, config.port)
    app = create_app(config, database_url=database_url)
    host = f"[{config.host}]" if ":" in config.host else config.host
    guard = "" if config.token is None else " (token required)"
    engine = f"; the {config.engine} engine is starting" if config.run_engine else "; it runs no tasks (--no-engine)"
    print(f"errand serve: http://{host}:{config.port}{guard}{engine}", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, access_log=False, timeout_graceful_shutdown=10,
                                           server_header=False))
    server.run(sockets=[listening])


def bind(host: str, port: int) -> socket.socket:
    """The server's listening socket, or a :class:`ConfigError` that says the port is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listening = socket.socket(family, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((host, port))
    except OSError as error:
        listening.close()
        if error.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {host} is taken (another errand serve?); choose another with --port, "
                              "or stop what listens there", code="port_taken") from None
        raise ConfigError(f"cannot listen on {host}:{port}: {error.strerror}", code="cannot_listen") from None
    listening.listen(2048)
    listening.set_inheritable(True)
    return listening
