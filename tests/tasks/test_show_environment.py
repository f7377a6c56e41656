"""``errand show`` says which environment a run used, what it was keyed on, and whether it was
reused: two tasks on two commits of an npm project (a lockfile, a build script, a test),
through the command line a person types."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import errand, errand_json, script
from engine.harness import git

pytestmark = [pytest.mark.slow]

MANIFEST = {"name": "pricing", "version": "1.0.0", "private": True,
            "scripts": {"build": "node build.js", "test": "node test.js"}}
FILES = {
    "package.json": json.dumps(MANIFEST, indent=2) + "\n",
    # No dependencies: npm ci needs no registry.
    "package-lock.json": json.dumps({"name": "pricing", "version": "1.0.0", "lockfileVersion": 3, "requires": True,
                                     "packages": {"": {"name": "pricing", "version": "1.0.0"}}}, indent=2) + "\n",
    "build.js": "const fs = require('fs');\nfs.mkdirSync('dist', { recursive: true });\n"
                "fs.copyFileSync('src/price.js', 'dist/price.js');\n",
    "src/price.js": "exports.withTax = (cents, rate) => cents + cents * rate;\n",
    "test.js": "const assert = require('assert');\nassert.strictEqual(require('./dist/price').withTax(999, 0.0825), "
               "1081);\nconsole.log('1 passed');\n",
    ".gitignore": "node_modules/\ndist/\n",
    "errand.toml": '[setup]\ncommands = ["npm ci --no-audit --no-fund"]\n\n[test]\ncommand = "npm test"\n',
}
ROUND = "exports.withTax = (cents, rate) => Math.round(cents + cents * rate);\n"


def _commit(repo: Path, message: str, files: dict[str, str]) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def _task_on_head(home: Path, repo: Path, model: str) -> str:
    ran = errand(home, "run", "round the price", "--repo", str(repo), "--model", model, "-f")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return str(errand_json(home, "ls")[0]["id"])


def test_show_says_which_environment_what_it_was_keyed_on_and_that_a_new_commit_reused_it(
        errand_home: Path, tmp_path: Path) -> None:
    repo = tmp_path / "pricing"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Test User")
    git(repo, "config", "user.email", "user@example.com")
    _commit(repo, "pricing 1.0.0", FILES)
    model = script(tmp_path / "agent.json", [
        [("shell", {"command": "echo '// checked' >> src/price.js"})],
        [("finish", {"summary": "touched", "assumptions": []})]])
    first = _task_on_head(errand_home, repo, model)
    _commit(repo, "round", {"src/price.js": ROUND, "package.json": json.dumps({**MANIFEST, "version": "1.1.0"})})
    second = _task_on_head(errand_home, repo, model)

    shown = " ".join(errand(errand_home, "show", first).stdout.split())  # as one line, however it wrapped
    assert "built for this round" in shown, shown
    assert "keyed on: package-lock.json, package.json's dependency tables, errand.toml's setup, the image" in shown
    key = shown.split("environment: ", 1)[1].split(",", 1)[0]
    shown = " ".join(errand(errand_home, "show", second).stdout.split())
    assert f"reused from {key} (another commit, same dependencies)" in shown, shown
    assert "refreshed for the commit with: npm run build" in shown, shown
    # The refresh built this commit's source: its tests pass on the base (the first commit's failed).
    assert "tests on base: pass" in shown, shown
