#!/usr/bin/env python3
"""errand on the forge: webhook receipt → pickup reaction, and issue → pull request opened.

    .venv/bin/python benchmarks/forge.py [--pickups 30] [--issues 5] [--forges github,gitea,gitlab] [--quick]

Against the loopback GitHub of the tests (``tests/forge/fakegithub.py``: githubkit and
``git push`` over smart HTTP talk to it as to GitHub), with a real ``errand serve``:

1. **pickup**: ``--pickups`` signed ``issues.labeled`` deliveries, one at a time, to an
   ``errand serve --no-engine``; timed from just before the POST to the moment the
   forge records errand's 👀 reaction (verify, de-duplicate, read the issue and its
   thread, pin the default branch's head with a fetch, queue the task, react).
2. **issue → PR**: ``--issues`` issues, one at a time, on an ``errand serve`` that runs
   tasks (a scripted model: one shell step, then finish), each accepted through the API
   as soon as it is ready; timed from the delivery to the pull request's creation on
   the forge. Reported beside it: the part that is errand's own forge work (accept →
   PR opened), the rest being the task's run in its sandbox.

With ``--forges`` naming ``gitea`` or ``gitlab``, the pickup is measured on the tests'
loopback Gitea and GitLab too (``tests/forge/fakegitea.py``, ``fakegitlab.py``: a signed
``issue_label`` delivery to 👀; an ``Issue Hook`` adding the label to its award emoji).

The script reports; it does not assert. It removes what it made.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the loopback GitHub and the sample project live with the tests

from engine.harness import make_repo  # noqa: E402
from forge.fakegitea import FakeGitea  # noqa: E402
from forge.fakegithub import FakeGitHub  # noqa: E402
from forge.fakegitlab import FakeGitLab  # noqa: E402
from server.conftest import Served, start_server  # noqa: E402

TOKEN = "ghp_benchmarkToken0123456789"
SECRET = "benchmark-secret"
REPO = "acme/calc"
WORK = [{"tool_calls": [{"name": "shell", "arguments": {
    "command": "sed -i 's/return a - b/return a + b/' calc.py && python3 test_calc.py"}}]},
        {"tool_calls": [{"name": "finish", "arguments": {"summary": "add() adds", "assumptions": []}}]}]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def line(name: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (f"{name:<36} p50 {statistics.median(ms):8.1f} ms   p95 {percentile(ms, 0.95):8.1f} ms   "
            f"max {max(ms):8.1f} ms   n={len(ms)}")


def wait(probe: Any, seconds: float = 300) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting on the forge")
        time.sleep(0.01)


def serve(tmp: Path, home: Path, *args: str, forge: str = "github") -> Served:
    secrets = {"github": {"GITHUB_TOKEN": TOKEN, "ERRAND_WEBHOOK_SECRET": SECRET},
               "gitea": {"GITEA_TOKEN": TOKEN, "ERRAND_GITEA_WEBHOOK_SECRET": SECRET},
               "gitlab": {"GITLAB_TOKEN": TOKEN, "ERRAND_GITLAB_WEBHOOK_SECRET": SECRET}}[forge]
    env = {"ERRAND_HOME": str(home), **secrets, "ERRAND_FORGE_SYNC": "0.1", "PYTHONPATH": str(ROOT / "src")}
    return start_server(tmp, *args, "--log-level", "warning", env=env)


def label(fake: FakeGitHub, served: Served, number: int) -> float:
    start = time.monotonic()
    answer = fake.deliver(f"{served.url}/api/forge/github/webhook", "issues",
                          fake.issue_payload(REPO, number, "labeled", label={"name": "errand"}))
    if answer.status_code != 202:
        raise SystemExit(f"delivery refused: {answer.status_code} {answer.text}")
    return start


def pickups(fake: FakeGitHub, tmp: Path, home: Path, count: int) -> list[float]:
    served = serve(tmp / "pickup", home, "--no-engine")
    try:
        times = []
        for n in range(count):
            issue = fake.add_issue(REPO, f"add() subtracts ({n})", "add(2, 3) gives -1")
            start = label(fake, served, issue["number"])
            target = f"issue:{issue['number']}"
            reaction = wait(lambda t=target: next((r for r in fake.repos[REPO].reactions if r["target"] == t), None))
            times.append(reaction["_t"] - start)
        return times
    finally:
        served.stop()


def issues_to_pulls(fake: FakeGitHub, tmp: Path, home: Path, count: int) -> tuple[list[float], list[float]]:
    served = serve(tmp / "pulls", home, "--concurrency", "1")
    try:
        whole, forge_part = [], []
        for n in range(count):
            issue = fake.add_issue(REPO, f"add() is wrong ({n})", "add(2, 3) gives -1")
            start = label(fake, served, issue["number"])
            task_id = next(link for link in reversed(list(fake.repos[REPO].comments[issue["number"]])))["body"]
            task_id = task_id.split("`")[1]
            wait(lambda i=task_id: httpx.get(f"{served.url}/api/tasks/{i}").json()["state"] == "ready_for_review")
            accepted = time.monotonic()
            httpx.post(f"{served.url}/api/tasks/{task_id}/accept", json={}, timeout=60).raise_for_status()
            pull = wait(lambda i=task_id: next((p for p in fake.repos[REPO].pulls.values() if i in p["body"]), None))
            whole.append(pull["_t"] - start)
            forge_part.append(pull["_t"] - accepted)
        return whole, forge_part
    finally:
        served.stop()


def other_pickups(forge: str, tmp: Path, count: int) -> list[float]:
    """Webhook → pickup reaction on the loopback Gitea or GitLab."""
    root = tmp / forge
    fake: Any = (FakeGitea if forge == "gitea" else FakeGitLab)(root, token=TOKEN, webhook_secret=SECRET).start()
    try:
        project = make_repo(root / "calc")
        fake.add_repo(REPO, project)
        home = root / "home"
        home.mkdir()
        (root / "work.json").write_text(json.dumps(WORK))
        (home / "forge.toml").write_text(f'[{forge}]\nbase_url = "{fake.api_url}"\n\n[{forge}.repos."{REPO}"]\n'
                                         f'path = "{project}"\nmodel = "scripted:{root / "work.json"}"\n')
        (root / "serve").mkdir()
        served = serve(root / "serve", home, "--no-engine", forge=forge)
        hook = f"{served.url}/api/forge/{forge}/webhook"
        try:
            times = []
            for n in range(count):
                if forge == "gitea":
                    number = fake.add_issue(REPO, f"add() subtracts ({n})", "-1", labels=("errand",))["number"]
                    start = time.monotonic()
                    answer = fake.deliver(hook, "issues", fake.label_payload(REPO, number), event_type="issue_label")
                    found = (lambda t=f"issue:{number}": next(
                        (r for r in fake.repos[REPO].reactions if r["target"] == t), None))
                else:
                    number = fake.add_issue(REPO, f"add() subtracts ({n})", "-1")["iid"]
                    start = time.monotonic()
                    answer = fake.deliver(hook, "Issue Hook", fake.issue_hook(REPO, number, added=("errand",)))
                    found = (lambda t=f"issues:{number}": next(
                        (a for a in fake.projects[REPO].awards if a["awardable"] == t), None))
                if answer.status_code != 202:
                    raise SystemExit(f"delivery refused: {answer.status_code} {answer.text}")
                times.append(wait(found)["_t"] - start)
            return times
        finally:
            served.stop()
    finally:
        fake.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pickups", type=int, default=30)
    parser.add_argument("--issues", type=int, default=5)
    parser.add_argument("--forges", default="github", help="github, gitea, gitlab (comma-separated)")
    parser.add_argument("--quick", action="store_true", help="a run of seconds: 2 pickups, 1 issue, on GitHub")
    options = parser.parse_args()
    if options.quick:
        options.pickups, options.issues, options.forges = 2, 1, "github"
    forges = [f.strip() for f in options.forges.split(",") if f.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="errand-bench-forge-"))
    fake = FakeGitHub(tmp / "github", token=TOKEN, webhook_secret=SECRET).start()
    try:
        project = make_repo(tmp / "calc")
        fake.add_repo(REPO, project)
        home = tmp / "home"
        home.mkdir()
        script = tmp / "work.json"
        script.write_text(json.dumps(WORK))
        (home / "forge.toml").write_text(f'[github]\nbase_url = "{fake.api_url}"\n\n[github.repos."{REPO}"]\n'
                                         f'path = "{project}"\nmodel = "scripted:{script}"\n')
        for name in ("pickup", "pulls"):
            (tmp / name).mkdir()
        if "github" in forges:
            print(line("webhook → pickup reaction", pickups(fake, tmp, home, options.pickups)))
            whole, forge_part = issues_to_pulls(fake, tmp, home, options.issues)
            print(line("issue → PR opened", whole))
            print(line("  of which accept → PR opened", forge_part))
        for other in (f for f in forges if f in ("gitea", "gitlab")):
            print(line(f"webhook → pickup reaction ({other})", other_pickups(other, tmp, options.pickups)))
    finally:
        fake.stop()
        subprocess.run(["git", "worktree", "prune"], cwd=tmp, capture_output=True, check=False)
        shutil.rmtree(tmp, ignore_errors=True)



if __name__ == "__main__":
    main()
