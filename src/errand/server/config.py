"""How ``errand serve`` is set up: one immutable value, checked when it is made.

The rule that matters: a server bound to anything but loopback needs a token.
Without one, anyone who can reach the address could run agents on this machine
and accept their diffs into its repositories.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from errand import _settings
from errand.errors import ConfigError
from errand.tasks.engines import choice as engines

__all__ = ["LOOPBACK_NAMES", "ServerConfig", "is_loopback"]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
MIN_TOKEN_LENGTH = 16


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address or a Host header's name) names this machine's loopback."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServerConfig:
    """``errand serve``'s settings.

    ``token``: required beyond loopback; every API request then carries it as a
    bearer token and the web UI asks for it once at login. ``repo_roots``: when
    given, the repositories tasks name (and ``accept --into``) must lie inside
    one of them. ``allow_scripted_models``: a scripted model names a file on the
    server, so remote callers may not use one unless this is set (tests, demos).
    """

    host: str = "127.0.0.1"
    port: int = 8470
    token: str | None = None
    concurrency: int = 2
    run_engine: bool = True
    engine: str = "local"  # which engine runs tasks (errand.tasks.engines.choice.ENGINES)
    temporal: str | None = None  # the Temporal service's address, for the temporal engine
    allow_scripted_models: bool = False
    repo_roots: tuple[Path, ...] = field(default_factory=tuple)
    poll_interval: float = 0.1
    eval_runs: Path | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be from 0 to 65535, not {self.port!r}", code="invalid_port")
        if self.token is not None and len(self.token) < MIN_TOKEN_LENGTH:
            raise ConfigError(f"the token must be at least {MIN_TOKEN_LENGTH} characters "
                              "(e.g. `python3 -c 'import secrets; print(secrets.token_urlsafe())'`)",
                              code="weak_token")
        if self.token is None and not is_loopback(self.host):
            raise ConfigError(f"binding {self.host} reaches beyond this machine: set a token with --token or "
                              "ERRAND_TOKEN, or bind 127.0.0.1", code="token_required")
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ConfigError(f"concurrency must be a positive integer, not {self.concurrency!r}",
                              code="invalid_concurrency")
        if self.run_engine:
            engines.check(self.engine, self.temporal)
        object.__setattr__(self, "eval_runs", Path(self.eval_runs or _settings.eval_runs_dir()).expanduser())
        object.__setattr__(self, "repo_roots", tuple(Path(root).expanduser().resolve() for root in self.repo_roots))

    @classmethod
    def from_environment(cls, **given: object) -> ServerConfig:
        """Arguments given win over ``ERRAND_TOKEN``; ``None`` means not given."""
        values = {key: value for key, value in given.items() if value is not None}
        token = values.pop("token", None) or os.environ.get("ERRAND_TOKEN") or None
        return cls(token=token, **values)  # type: ignore[arg-type]

    @property
    def loopback_only(self) -> bool:
        return is_loopback(self.host)

    def check_repo_path(self, path: str | Path) -> None:
        """Refuse a local path outside ``repo_roots`` (when they are set)."""
        if not self.repo_roots:
            return
        resolved = Path(path).expanduser().resolve()
        if not any(resolved == root or root in resolved.parents for root in self.repo_roots):
            raise ConfigError(f"{path} is outside the repositories this server serves "
                              f"({', '.join(str(r) for r in self.repo_roots)})", code="repo_not_allowed")
