"""Where errand meets a forge: ``forge.toml`` in errand's home, then ``ERRAND_*`` variables.

The file never holds a secret: it names the variables that hold the token and the
webhook secret, as ``config.toml`` names a model key's variable::

    [github]
    base_url = "https://api.github.com"     # GitHub Enterprise: https://HOST/api/v3
    token_env = "GITHUB_TOKEN"               # the variable holding the token
    webhook_secret_env = "ERRAND_WEBHOOK_SECRET"
    label = "errand"                          # an issue labelled so starts a task
    mention = "@errand"                       # a comment starting so starts one
    draft = true                              # pull requests open as drafts
    pr = "on-accept"                          # or "draft-when-ready": a ready task opens a draft,
                                              # and `@errand accept` on it accepts the task
    ci_fix_attempts = 0                       # rounds a red CI may start on a pull request

    [github.repos."owner/name"]
    path = "/srv/clones/name"                 # the local clone tasks run on and accept into
    model = "gpt"                             # the model webhook tasks use (default: errand's)

``ERRAND_GITHUB_URL`` overrides ``base_url``; ``ERRAND_GITHUB_TOKEN`` is read before the
variable ``token_env`` names.

``[gitea]`` (Gitea and Forgejo) and ``[gitlab]`` take the same settings; a repository is
on the forge whose table lists it. Their defaults: ``token_env`` ``GITEA_TOKEN`` /
``GITLAB_TOKEN``, ``webhook_secret_env`` ``ERRAND_GITEA_WEBHOOK_SECRET`` /
``ERRAND_GITLAB_WEBHOOK_SECRET`` (a secret of its own: GitLab sends its secret as it is,
and that must not be GitHub's signing key), ``base_url`` none for Gitea (it is
self-hosted: ``https://HOST/api/v1``) and ``https://gitlab.com/api/v4`` for GitLab;
``ERRAND_GITEA_URL``, ``ERRAND_GITEA_TOKEN`` and their GitLab twins as for GitHub.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from errand import _settings
from errand.errors import ConfigError
from errand.forge.errors import ForgeError

__all__ = ["DEFAULT_API", "DISPLAY", "ForgeSettings", "RepoSettings", "settings_path"]

DEFAULT_API = "https://api.github.com"
DISPLAY = {"github": "GitHub", "gitea": "Gitea", "gitlab": "GitLab"}
_DEFAULTS: dict[str, dict[str, str]] = {
    "github": {},
    "gitea": {"base_url": "", "token_env": "GITEA_TOKEN", "webhook_secret_env": "ERRAND_GITEA_WEBHOOK_SECRET"},
    "gitlab": {"base_url": "https://gitlab.com/api/v4", "token_env": "GITLAB_TOKEN",
               "webhook_secret_env": "ERRAND_GITLAB_WEBHOOK_SECRET"},
}

_KEYS = frozenset({"base_url", "token_env", "webhook_secret_env", "label", "mention", "draft", "ci_fix_attempts",
                   "pr", "repos"})
PR_POLICIES = ("on-accept", "draft-when-ready")
MAX_CI_FIXES = 5
_REPO_KEYS = frozenset({"path", "model"})
_SECRETS = frozenset({"token", "webhook_secret", "secret", "password"})
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def settings_path() -> Path:
    return _settings.home() / "forge.toml"


@dataclass(frozen=True)
class RepoSettings:
    path: Path
    model: str | None = None


@dataclass(frozen=True)
class ForgeSettings:
    base_url: str = DEFAULT_API
    token_env: str = "GITHUB_TOKEN"
    webhook_secret_env: str = "ERRAND_WEBHOOK_SECRET"
    label: str = "errand"
    mention: str = "@errand"
    draft: bool = True
    ci_fix_attempts: int = 0
    pr: str = "on-accept"
    repos: Mapping[str, RepoSettings] = field(default_factory=dict)
    kind: str = "github"  # the table: github | gitea | gitlab

    @classmethod
    def load(cls, path: Path | None = None, environ: Mapping[str, str] | None = None, *,
             kind: str = "github") -> ForgeSettings:
        environ = os.environ if environ is None else environ
        path = path or settings_path()
        table = _read(path).get(kind, {}) if path.exists() else {}
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [{kind}] must be a table", code="invalid_config")
        values = {**_DEFAULTS[kind], **_checked(table, path, kind)}
        if environ.get(f"ERRAND_{kind.upper()}_URL"):
            values["base_url"] = environ[f"ERRAND_{kind.upper()}_URL"]
        return cls(**values, kind=kind)

    @property
    def display(self) -> str:
        return DISPLAY[self.kind]

    def token(self, environ: Mapping[str, str] | None = None) -> str:
        environ = os.environ if environ is None else environ
        own = f"ERRAND_{self.kind.upper()}_TOKEN"
        token = environ.get(own) or environ.get(self.token_env) or ""
        if not token.strip():
            raise ForgeError(f"no {self.display} token: set {own} or {self.token_env} (a token that may read "
                             "issues and write contents and pull requests)", code="forge_not_configured")
        return token.strip()

    def webhook_secret(self, environ: Mapping[str, str] | None = None) -> str | None:
        environ = os.environ if environ is None else environ
        return (environ.get(self.webhook_secret_env) or "").strip() or None

    def repo(self, name: str) -> RepoSettings:
        found = self.repos.get(name)
        if found is None:
            raise ForgeError(f"{name} is not set up here: add [{self.kind}.repos.\"{name}\"] path = \"/path/to/clone\" "
                             f"to {settings_path()} (`errand forge connect {self.kind} --repo {name} --path CLONE`)",
                             code="forge_not_configured")
        return found


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: {error}", code="invalid_toml") from None


def _checked(table: dict[str, Any], path: Path, kind: str = "github") -> dict[str, Any]:
    secret = sorted(_SECRETS & set(table))
    if secret:
        raise ConfigError(f"{path}: [{kind}] {secret[0]!r} is not a setting: the file names the variable that holds "
                          "it (token_env = \"NAME\"), never the secret itself", code="unknown_key")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"{path}: [{kind}] has no setting {unknown[0]!r}; settings are {', '.join(sorted(_KEYS))}",
                          code="unknown_key")
    for key in ("token_env", "webhook_secret_env"):
        if key in table and not (isinstance(table[key], str) and _VARIABLE.match(table[key])):
            raise ConfigError(f"{path}: [{kind}] {key} must name an environment variable", code="invalid_config")
    fixes = table.get("ci_fix_attempts", 0)
    if isinstance(fixes, bool) or not isinstance(fixes, int) or not 0 <= fixes <= MAX_CI_FIXES:
        raise ConfigError(f"{path}: [{kind}] ci_fix_attempts must be a whole number from 0 to {MAX_CI_FIXES}",
                          code="invalid_config")
    if table.get("pr", "on-accept") not in PR_POLICIES:
        raise ConfigError(f"{path}: [{kind}] pr must be one of {', '.join(repr(p) for p in PR_POLICIES)}",
                          code="invalid_config")
    values = {k: v for k, v in table.items() if k != "repos"}
    repos = table.get("repos", {})
    if not isinstance(repos, dict):
        raise ConfigError(f"{path}: [{kind}.repos] must be tables such as [{kind}.repos.\"owner/name\"]",
                          code="invalid_config")
    values["repos"] = {name: _repo(name, value, path, kind) for name, value in repos.items()}
    return values


def _repo(name: str, table: object, path: Path, kind: str = "github") -> RepoSettings:
    if not isinstance(table, dict) or not isinstance(table.get("path"), str) or set(table) - _REPO_KEYS:
        raise ConfigError(f"{path}: [{kind}.repos.\"{name}\"] needs path = \"/path/to/clone\" (and may set model)",
                          code="invalid_config")
    return RepoSettings(Path(table["path"]).expanduser(), table.get("model"))
