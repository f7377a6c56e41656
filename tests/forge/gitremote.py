"""A forge's git remote for the loopback forges: bare repositories served over git's smart
HTTP protocol by the real ``git http-backend``, pushed to with the token as a Basic password
(as GitHub, Gitea and GitLab all take a token)."""

from __future__ import annotations

import base64
import hmac
import os
import subprocess
from http.server import BaseHTTPRequestHandler
from pathlib import Path


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
    return env


def git(cwd: Path | None, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=git_env()).stdout


def bare_clone(root: Path, full_name: str, source: Path) -> Path:
    """``root/git/<full_name>.git``: a bare clone of ``source``, the remote the forge serves."""
    bare = root / "git" / f"{full_name}.git"
    bare.parent.mkdir(parents=True, exist_ok=True)
    git(None, "clone", "-q", "--bare", str(source), str(bare))
    return bare


def branch_head(bare: Path, branch: str) -> str | None:
    ran = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=bare,
                         capture_output=True, text=True, env=git_env())
    return ran.stdout.strip() or None


def basic_user(header: str, token: str) -> str | None:
    if not header.startswith("Basic "):
        return None
    user, _, password = base64.b64decode(header[6:]).decode().partition(":")
    return user if hmac.compare_digest(password, token) else None


def serve_git(handler: BaseHTTPRequestHandler, root: Path, token: str, method: str, path: str, query: str,
              raw: bytes) -> None:
    """Answer one smart-HTTP request under ``root/git`` (401 without the token)."""
    user = basic_user(handler.headers.get("Authorization", ""), token)
    if user is None:
        handler.send_response(401)
        handler.send_header("WWW-Authenticate", 'Basic realm="fake"')
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return
    env = {**git_env(), "GIT_PROJECT_ROOT": str(root / "git"), "GIT_HTTP_EXPORT_ALL": "1",
           "REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "REMOTE_USER": user,
           "REMOTE_ADDR": "127.0.0.1", "CONTENT_TYPE": handler.headers.get("Content-Type", ""),
           "CONTENT_LENGTH": str(len(raw)), "GIT_PROTOCOL": handler.headers.get("Git-Protocol", "")}
    ran = subprocess.run(["git", "http-backend"], input=raw, capture_output=True, env=env)
    head, _, content = ran.stdout.partition(b"\r\n\r\n")
    status = 200
    headers = []
    for line in head.decode().split("\r\n"):
        key, _, value = line.partition(":")
        if key.lower() == "status":
            status = int(value.strip().split()[0])
        elif key:
            headers.append((key, value.strip()))
    handler.send_response(status)
    for key, value in headers:
        handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(content)))
    handler.end_headers()
    handler.wfile.write(content)
