"""``errand eval``: grade patches, validate a dataset, run an agent on it, compare runs.

A DATASET is a SWE-bench-format JSON or JSONL file, or ``sample`` for the small
dataset shipped with errand (built on first use). Its specs (setup and test
commands per repository) come from ``--specs``, else a ``specs.toml`` beside the
dataset. Every command keeps its results in a run directory (``--run-dir``,
default ``<runs>/<command>-<dataset>``, where ``<runs>`` is ``$ERRAND_EVAL_RUNS`` or the
errand home's ``eval-runs``, which ``errand serve`` shows at ``/eval``), resumes what it
finds there, and ends by writing the run's HTML report into it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from errand import _settings
from errand._text import printable
from errand.errors import ConfigError, ErrandError

if TYPE_CHECKING:  # the eval harness is imported by the commands that run it: every errand command loads this module
    from errand.eval.dataset import Dataset
    from errand.eval.grading import Grade, GradeOptions
    from errand.eval.metrics import Attempt
    from errand.eval.mine import Mined

__all__ = ["eval_app"]

T = TypeVar("T")
P = ParamSpec("P")
eval_app = typer.Typer(no_args_is_help=True, help="Evaluate models and configurations on a team's own tasks.",
                       rich_markup_mode=None)

DatasetArg = Annotated[str, typer.Argument(help="A SWE-bench-format JSON/JSONL file, or 'sample'.")]
SpecsOpt = Annotated[Path | None, typer.Option("--specs", help="Setup and test commands per repository (TOML).")]
MirrorOpt = Annotated[Path | None, typer.Option("--mirror", help="A directory of clones named owner__name.")]
InstanceOpt = Annotated[list[str] | None, typer.Option("--instance", "-i", help="Only this instance (repeatable).")]
JobsOpt = Annotated[int, typer.Option("--jobs", "-j", help="Instances graded at once.")]
RunDirOpt = Annotated[Path | None, typer.Option("--run-dir", help="Where results go (resumed if present).")]
FreshOpt = Annotated[bool, typer.Option("--fresh", help="Start the run directory anew instead of resuming.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")]
IsolationOpt = Annotated[str | None, typer.Option("--isolation", help="Sandbox tier (default $ERRAND_ISOLATION).")]


def _console() -> Console:
    return Console(emoji=False)


def _run(work: Coroutine[Any, Any, T]) -> T:
    with _reported():
        return asyncio.run(work)


@contextmanager
def _reported() -> Iterator[None]:
    """errand's errors end the command with one red line and an exit code, never a traceback."""
    try:
        yield
    except ErrandError as error:
        Console(stderr=True, emoji=False).print(f"error: {printable(error.message)}", style="red", markup=False,
                                                highlight=False, soft_wrap=True)
        raise typer.Exit(2 if isinstance(error, ConfigError) else 1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _command(function: Callable[P, None]) -> Callable[P, None]:
    """A command whose whole body reports errand's errors as :func:`_reported` does."""
    @functools.wraps(function)
    def reported(*args: P.args, **kwargs: P.kwargs) -> None:
        with _reported():
            function(*args, **kwargs)

    return reported


def _dataset(name: str, specs: Path | None, mirror: Path | None, only: list[str] | None) -> Dataset:
    from errand.eval.dataset import load_dataset
    from errand.eval.sample import sample_dir

    path = sample_dir(_settings.cache_dir()) if name == "sample" else Path(name)
    if specs is None and (path.parent / "specs.toml").is_file():
        specs = path.parent / "specs.toml"
    return load_dataset(path, specs=specs, mirror=mirror, only=only or ())


def _run_dir(given: Path | None, command: str, dataset: str, fresh: bool) -> Path:
    run = given or _settings.eval_runs_dir() / f"{command}-{Path(dataset).stem}"
    if fresh and run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True, exist_ok=True)
    return run


def _same_model(run: Path, model: str) -> None:
    """A resumed run keeps its model: another model's attempts would be mixed into its figures."""
    before = _saved_json(run / "run.json").get("model")
    if before is not None and before != model:
        raise typer.BadParameter(f"{run} holds a run of {before}: give another --run-dir, or --fresh to start it "
                                 "anew", param_hint="--model")


def _options(isolation: str | None) -> GradeOptions:
    from errand.eval.grading import GradeOptions

    return GradeOptions(isolation=isolation or os.environ.get("ERRAND_ISOLATION") or "namespace")


@contextmanager
def _progress(total: int, what: str) -> Iterator[Callable[[str], None]]:
    """Per-instance progress on stderr: a bar on a terminal, a line per instance elsewhere (a log
    or a pipe), so a long run shows it is alive; stdout keeps the summary (and ``--json``) alone."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if not sys.stderr.isatty():
        done = 0

        def line(last: str) -> None:
            nonlocal done
            done += 1
            print(f"{what} {done}/{total}: {printable(last, lines=False)}", file=sys.stderr, flush=True)

        yield line
        return
    progress = Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[last]}"), console=Console(stderr=True), transient=True)
    with progress:
        bar = progress.add_task(what, total=total, last="")

        def step(last: str) -> None:
            progress.update(bar, advance=1, last=printable(last, lines=False))

        yield step


def _graded(step: Callable[[str], None]) -> Callable[[Grade, bool], None]:
    """The progress callback of grading, on the bar ``step`` advances."""
    def advance(result: Grade, resumed: bool) -> None:
        step(f"{result.instance_id} {result.label}: {result.status}{' (resumed)' if resumed else ''}")

    return advance


# ------------------------------------------------------------------ commands


@eval_app.command("sample")
@_command
def sample(dest: Annotated[Path, typer.Argument(help="Directory to write the sample dataset to.")]) -> None:
    """Write the shipped sample dataset (three tiny repositories, fifteen real bugs) to DEST."""
    from errand.eval.sample import build as build_sample

    dataset = build_sample(dest)
    _console().print(f"wrote {dataset} and {dataset.with_name('specs.toml')}", markup=False, highlight=False)


@eval_app.command("mine")
@_command
def mine_commits(repo: Annotated[Path, typer.Argument(help="A local clone of the repository.")],
                 commits: Annotated[list[str], typer.Argument(help="Fix commits, or ranges A..B.")],
                 out: Annotated[Path, typer.Option("--out", "-o", help="The dataset to write (JSONL).")],
                 name: Annotated[str | None, typer.Option(help="The instances' repo, owner/name (default: the "
                                                                "directory's name).")] = None,
                 specs: SpecsOpt = None,
                 statements: Annotated[Path | None, typer.Option(
                     help="A JSON object of commit -> problem statement (default: the commit message).")] = None,
                 jobs: JobsOpt = 1, isolation: IsolationOpt = None) -> None:
    """Make SWE-bench-format instances of fix commits: code and test patches split by path, FAIL_TO_PASS
    and PASS_TO_PASS from running the test files in a sandbox without and with the fix."""
    from errand.eval.mine import MineOptions, mine, write_dataset

    options = MineOptions(name=name, specs=specs, statements=_statements(statements), grading=_options(isolation),
                          concurrency=jobs)
    with _progress(len(commits), "mining") as step:
        found = _run(mine(repo, commits, options, progress=lambda item: step(item.commit[:12])))
    written = write_dataset(out, found)
    _show_mined(found, out, written)
    if not written:
        raise typer.Exit(1)


def _statements(path: Path | None) -> dict[str, str]:
    if path is None:
        return {}
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read the statements {path}: {error}", code="eval_bad_statements") from None
    if not isinstance(loaded, dict) or not all(isinstance(v, str) for v in loaded.values()):
        raise ConfigError(f"{path}: expected a JSON object of commit -> statement", code="eval_bad_statements")
    return loaded


def _show_mined(found: list[Mined], out: Path, written: int) -> None:
    console = _console()
    for item in found:
        if item.record is None:
            line = f"{item.commit[:12]} skipped: {item.skipped}"
        else:
            counts = [len(json.loads(item.record[key])) for key in ("FAIL_TO_PASS", "PASS_TO_PASS")]
            line = (f"{item.commit[:12]} {item.record['instance_id']}: FAIL_TO_PASS {counts[0]}, "
                    f"PASS_TO_PASS {counts[1]}")
        console.print(printable(line), markup=False, highlight=False, soft_wrap=True)
    console.print(f"wrote {written} instance(s) to {out}; check them with: errand eval validate {out}",
                  markup=False, highlight=False, soft_wrap=True)


@eval_app.command("grade")
@_command
def grade(dataset: DatasetArg, predictions: Annotated[Path, typer.Argument(help="SWE-bench predictions.")],
          specs: SpecsOpt = None, mirror: MirrorOpt = None, instance: InstanceOpt = None, jobs: JobsOpt = 1,
          run_dir: RunDirOpt = None, fresh: FreshOpt = False, as_json: JsonOpt = False,
          isolation: IsolationOpt = None) -> None:
    """Grade given patches: a report.json per instance and a summary."""
    from errand.eval.metrics import summarize
    from errand.eval.predictions import load_predictions
    from errand.eval.runs import GradeJob, grade_jobs, write_json

    data = _dataset(dataset, specs, mirror, instance)
    given = [p for p in load_predictions(predictions) if not instance or p.instance_id in instance]
    counts: dict[str, int] = {}
    job_list = []
    for prediction in given:
        data.get(prediction.instance_id)
        counts[prediction.instance_id] = counts.get(prediction.instance_id, 0) + 1
        job_list.append(GradeJob(data.get(prediction.instance_id), f"prediction-{counts[prediction.instance_id]}",
                                 prediction.model_patch))
    run = _run_dir(run_dir, "grade", predictions.name, fresh)
    write_json(run / "run.json", {"command": "grade", "dataset": str(data.path), "predictions": str(predictions)})
    with _progress(len(job_list), "grading") as step:
        results = _run(grade_jobs(job_list, run, concurrency=jobs, options=_options(isolation),
                                  progress=_graded(step)))
    summary = summarize(_attempts(results))
    write_json(run / "summary.json", summary)
    _report_page(run)
    _show(summary, run, as_json)


@eval_app.command("validate")
@_command
def validate(dataset: DatasetArg, specs: SpecsOpt = None, mirror: MirrorOpt = None, instance: InstanceOpt = None,
             jobs: JobsOpt = 1, repeat: Annotated[int, typer.Option(help="Runs of each patch.")] = 3,
             run_dir: RunDirOpt = None, fresh: FreshOpt = False, as_json: JsonOpt = False,
             isolation: IsolationOpt = None) -> None:
    """Check a dataset: gold patches resolve, empty ones do not, no test is flaky. Exit 1 if not."""
    from errand.eval.runs import GradeJob, grade_jobs, validate_summary, write_json

    data = _dataset(dataset, specs, mirror, instance)
    job_list = [GradeJob(item, f"{kind}-{n}", patch) for item in data.instances
                for kind, patch in (("gold", item.patch), ("empty", "")) for n in range(1, repeat + 1)]
    run = _run_dir(run_dir, "validate", dataset, fresh)
    write_json(run / "run.json", {"command": "validate", "dataset": str(data.path), "repeat": repeat})
    with _progress(len(job_list), "validating") as step:
        results = _run(grade_jobs(job_list, run, concurrency=jobs, options=_options(isolation),
                                  progress=_graded(step)))
    summary = validate_summary(data, results)
    write_json(run / "summary.json", summary)
    _report_page(run)
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        _show_validation(summary, run)
    if not summary["ok"]:
        raise typer.Exit(1)


@eval_app.command("report")
@_command
def report(run_dir: Annotated[Path, typer.Argument(help="A run directory.")], as_json: JsonOpt = False,
           html: Annotated[bool, typer.Option("--html", help="Write the run's HTML report (report.html) again.")]
           = False) -> None:
    """Summarize a run directory again (after a resumed or a partial run)."""
    from errand.eval.runs import write_json

    summary = _run(_summarize(run_dir))
    if "gold_resolved" not in _saved_summary(run_dir):  # a validation's own summary is kept
        write_json(run_dir / "summary.json", summary)
    _show(summary, run_dir, as_json)
    if html:
        written = _run(_write_report(run_dir))
        _console().print(f"wrote {written}", markup=False, highlight=False)


def _saved_summary(run_dir: Path) -> dict[str, Any]:
    return _saved_json(run_dir / "summary.json")


def _saved_json(path: Path) -> dict[str, Any]:
    try:
        saved = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


async def _write_report(run_dir: Path) -> Path:
    return _report_page(run_dir)


def _report_page(run_dir: Path) -> Path:
    from errand.server.eval_report import write_report

    return write_report(run_dir)


async def _summarize(run_dir: Path) -> dict[str, Any]:
    from errand.eval.metrics import summarize
    from errand.eval.runs import load_attempts

    return summarize(load_attempts(run_dir))


@eval_app.command("compare")
@_command
def compare(run_a: Annotated[Path, typer.Argument(help="The first run directory.")],
            run_b: Annotated[Path, typer.Argument(help="The second run directory.")],
            as_json: JsonOpt = False) -> None:
    """Compare two runs instance by instance, with a bootstrap 95% interval of the difference."""
    result = _run(_compare(run_a, run_b))
    if as_json:
        print(json.dumps(result, indent=2))
        return
    console = _console()
    console.print(f"{result['instances']} shared instances: A resolved {result['resolved_a']:.1%}, "
                  f"B resolved {result['resolved_b']:.1%}", markup=False, highlight=False)
    low, high = result["ci95"]
    console.print(f"B − A: {result['difference']:+.1%} (95% interval {low:+.1%} to {high:+.1%}); "
                  f"B better on {len(result['b_better'])}, A better on {len(result['a_better'])}, "
                  f"{result['ties']} ties", markup=False, highlight=False)


async def _compare(run_a: Path, run_b: Path) -> dict[str, Any]:
    from errand.eval.compare import compare_runs

    return compare_runs(run_a, run_b)


# ------------------------------------------------------------------ output


def _attempts(results: list[Grade]) -> dict[str, list[Attempt]]:
    from errand.eval.metrics import Attempt

    found: dict[str, list[Attempt]] = {}
    for result in results:
        found.setdefault(result.instance_id, []).append(Attempt(result))
    return found


def _show(summary: dict[str, Any], run: Path, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    console = _console()
    table = Table("instance", "attempts", "resolved", "errors", "tokens", "cost", "grade s", title=None)
    for iid, row in summary["per_instance"].items():
        errors = ", ".join(sorted({e for e in row["errors"] if e}))
        table.add_row(printable(iid), str(row["attempts"]), str(row["resolved"]), printable(errors),
                      str(row["tokens"]), f"{row['cost']:.4f}", f"{row['grade_seconds']:.2f}")
    console.print(table)
    figures = " ".join(f"pass@{k}={v:.3f}" for k, v in summary.get("pass_at_k", {}).items())
    hats = " ".join(f"pass^{k}={v:.3f}" for k, v in summary.get("pass_hat_k", {}).items())
    console.print(f"resolved {summary['resolved_attempts']} of "
                  f"{summary['instances'] * summary['attempts_per_instance']} attempts; {figures}; {hats}",
                  markup=False, highlight=False)
    for kind, reasons in summary["failures"].items():
        if reasons:
            shown = ", ".join(f"{printable(reason)} ×{count}" for reason, count in reasons.items())
            console.print(f"{kind} failures: {shown}", markup=False, highlight=False)
    if any(row["attempts"] for row in summary["calibration"]):
        calibration = Table("confidence", "attempts", "resolved", "rate")
        for row in summary["calibration"]:
            rate = "–" if row["resolved_rate"] is None else f"{row['resolved_rate']:.0%}"
            calibration.add_row(row["confidence"], str(row["attempts"]), str(row["resolved"]), rate)
        console.print(calibration)
    console.print(f"reports in {run}/instances, summary in {run / 'summary.json'}, the run as a page in "
                  f"{run / 'report.html'}", markup=False, highlight=False)


def _show_validation(summary: dict[str, Any], run: Path) -> None:
    console = _console()
    console.print(f"gold resolved {summary['gold_resolved']}/{summary['instances']}, empty resolved "
                  f"{summary['empty_resolved']}/{summary['instances']}, flaky tests {len(summary['flaky'])}",
                  markup=False, highlight=False)
    for row in summary["per_instance"]:
        if not row["ok"]:
            console.print(f"  {printable(row['instance_id'])}: gold {row['gold']} {row['gold_errors']}, "
                          f"empty {row['empty']}", markup=False, highlight=False)
    for item in summary["flaky"]:
        console.print(f"  flaky: {printable(str(item['test']))} in {printable(item['instance_id'])} "
                      f"({item['patch']}): {item['outcomes']}", markup=False, highlight=False)
    console.print("valid" if summary["ok"] else "NOT valid", style="green" if summary["ok"] else "red")
    console.print(f"summary in {run / 'summary.json'}, the run as a page in {run / 'report.html'}", markup=False,
                  highlight=False)


@eval_app.command("run")
@_command
def run(dataset: DatasetArg,
        model: Annotated[str, typer.Option("--model", help="A named model or provider:model.")],
        k: Annotated[int, typer.Option("-k", help="Attempts per instance (pass@k for every k up to it).")] = 1,
        specs: SpecsOpt = None, mirror: MirrorOpt = None, instance: InstanceOpt = None, jobs: JobsOpt = 1,
        max_steps: Annotated[int | None, typer.Option(help="The agent's step budget per attempt.")] = None,
        run_dir: RunDirOpt = None, fresh: FreshOpt = False, as_json: JsonOpt = False,
        isolation: IsolationOpt = None) -> None:
    """Let the agent attempt every instance k times, grade each attempt, and report."""
    from errand.agent import Budgets
    from errand.eval.runs import write_json
    from errand.eval.solve import RunOptions, run_attempts

    data = _dataset(dataset, specs, mirror, instance)
    run_path = _run_dir(run_dir, "run", dataset, fresh)
    budgets = Budgets(max_steps=max_steps) if max_steps is not None else Budgets()
    options = RunOptions(model=model, attempts=k, concurrency=jobs, budgets=budgets, grading=_options(isolation))
    _same_model(run_path, model)
    write_json(run_path / "run.json", {"command": "run", "dataset": str(data.path), "model": model, "k": k})
    with _progress(len(data.instances) * k, "solving") as step:
        _run(run_attempts(data.instances, run_path, options, progress=_graded(step)))
    summary = _run(_summarize(run_path))
    write_json(run_path / "summary.json", summary)
    _report_page(run_path)
    _show(summary, run_path, as_json)
