"""The sample dataset errand ships, written out with git alone: fifteen SWE-bench instances of three
small projects, each starting at the commit before its fix, whose gold patch makes its failing test
pass; the specs file names each project's set-up and test command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from errand.eval.dataset import load_dataset
from errand.eval.sample import PROJECTS, SAMPLE_VERSION, build, sample_dir


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("sample") / "dataset")


def git(repo: Path, *args: str, given: str | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], input=given, check=True, capture_output=True,
                          text=True).stdout


def test_each_project_s_fixes_are_instances_with_their_specs(dataset: Path) -> None:
    loaded = load_dataset(dataset, specs=dataset.parent / "specs.toml")
    assert len(loaded) == 15 and [p.name for p in PROJECTS] == ["tally", "slugkit", "spans"]
    for instance in loaded.instances:
        project = instance.repo.split("/")[1]
        assert instance.instance_id.startswith(f"errand-eval__{project}-")
        assert instance.source.endswith(f"repos/{project}") and instance.spec.test
        assert len(instance.fail_to_pass) == 1 and instance.patch and instance.test_patch
        assert instance.test_files == (instance.fail_to_pass[0].split("::")[0],)
        assert isinstance(instance.raw["FAIL_TO_PASS"], str)  # a JSON string, as SWE-bench's datasets carry it


def test_an_instance_starts_before_its_fix_and_the_later_fixes_are_in_the_history(dataset: Path) -> None:
    records = [json.loads(line) for line in dataset.read_text().splitlines()]
    tally = [r for r in records if r["repo"] == "errand-eval/tally"]
    repo = dataset.parent / "repos" / "tally"
    log = git(repo, "log", "--format=%H", "main").split()[::-1]  # oldest first: 1.0.0, then each fix
    assert [r["base_commit"] for r in tally] == log[:5] and len(log) == 6
    assert git(repo, "tag").split() == ["v1.0.0"]


def test_the_gold_patch_makes_the_failing_test_pass_where_it_failed(dataset: Path, tmp_path: Path) -> None:
    record = json.loads(dataset.read_text().splitlines()[0])
    [failing] = json.loads(record["FAIL_TO_PASS"])
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(dataset.parent / "repos" / "tally"), str(checkout)], check=True)
    git(checkout, "checkout", "-q", record["base_commit"])
    git(checkout, "apply", "-", given=record["test_patch"])

    def passes() -> bool:
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", failing],
                             cwd=checkout, capture_output=True, text=True)
        return run.returncode == 0

    assert not passes()
    git(checkout, "apply", "-", given=record["patch"])
    assert passes()


def test_the_sample_is_built_once_under_the_cache(tmp_path: Path) -> None:
    first = sample_dir(tmp_path)
    assert first == tmp_path / "eval-sample" / SAMPLE_VERSION / "dataset.jsonl"
    first.write_text(first.read_text() + "\n")  # a rebuild would write it anew
    assert sample_dir(tmp_path).read_text().endswith("\n\n")
    assert [p.name for p in (tmp_path / "eval-sample").iterdir()] == [SAMPLE_VERSION]
