"""An evaluation run as one static HTML file (``RUN/report.html``), and the parts of it the
web UI's eval pages show too.

The file stands alone: its styles are inline, it runs no script and loads nothing (its
Content-Security-Policy says so), so it can be mailed or opened from a CI artifact. Each
attempt's diff and trajectory are in it, below the tables that link to them; the whole
trajectory is beside it in the attempt's directory. The diffs and trajectories are the
agent's text: they go through the same escaping views as the review page (diffview,
eventview) and the templates escape everything else.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from errand import _figures as figures
from errand._text import printable
from errand.eval.runview import AttemptView, RunView, read_run
from errand.server import diffview
from errand.server.eventview import render_event
from errand.tasks.records import Event

__all__ = ["REPORT_NAME", "attempt_parts", "render_report", "run_parts", "write_report"]

REPORT_NAME = "report.html"
TEMPLATES = Path(__file__).parent / "templates"
STYLE = Path(__file__).parent / "static" / "style.css"
EVENTS_SHOWN = 400  # per attempt in the report; the whole trajectory is in trajectory.json beside it


def shown(value: object) -> str:
    """Text from a run's files, with nothing invisible or reordering left in it."""
    return printable(str(value if value is not None else ""))


def _environment() -> Environment:
    environment = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]))
    environment.filters.update(duration=figures.duration, tokens=figures.tokens, money=figures.money, shown=shown)
    return environment


def run_parts(run: RunView) -> dict[str, Any]:
    """What the summary partial shows of a run: its figures as rows."""
    summary = run.summary
    ks = sorted(summary.get("pass_at_k", {}), key=int)
    return {"run": run, "summary": summary,
            "pass_rows": [(k, summary["pass_at_k"][k], summary["pass_hat_k"][k]) for k in ks],
            "calibration": summary.get("calibration", []), "failures": summary.get("failures", {}),
            "attempt_count": sum(len(i.attempts) for i in run.instances)}


def attempt_parts(attempt: AttemptView, *, limit: int | None = None, first_id: int = 1) -> dict[str, Any]:
    """An attempt's diff (files, highlighted and escaped) and trajectory (log lines, escaped;
    their element ids count from ``first_id``, so a page of several attempts repeats none)."""
    events = attempt.trajectory()
    cut = limit is not None and len(events) > limit
    lines = [render_event(_event(n, item)) for n, item in enumerate(events[:limit] if cut else events, first_id)]
    return {"attempt": attempt, "grade": attempt.grade, "agent": attempt.agent,
            "files": diffview.highlight(diffview.parse(attempt.patch())),
            "log": Markup("").join(lines), "events": len(events), "events_cut": cut,
            "tests": sorted(attempt.grade.tests.items())}


def _event(number: int, item: dict[str, Any]) -> Event:
    return Event(id=number, task_id="", run_id=None, seq=number, time=float(item.get("time") or 0.0),
                 kind=str(item.get("kind", "")), data=item.get("data") if isinstance(item.get("data"), dict) else {})


def render_report(run: RunView) -> str:
    css = Markup(STYLE.read_text() + "\n" + diffview.css())  # ours, not the agent's
    attempts = [attempt_parts(a, limit=EVENTS_SHOWN, first_id=1 + n * EVENTS_SHOWN) for n, a in enumerate(run.attempts)]
    return _environment().get_template("eval_report.html").render(**run_parts(run), css=css, attempts=attempts,
                                                                  static=True)


def write_report(run_dir: Path) -> Path:
    """Write ``run_dir/report.html`` from what the run directory holds; its path."""
    page = render_report(read_run(run_dir))
    target = run_dir / REPORT_NAME
    partial = run_dir / f".{REPORT_NAME}.{os.getpid()}.tmp"
    partial.write_text(page)
    os.replace(partial, target)
    return target
