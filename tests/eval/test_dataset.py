"""Loading a SWE-bench dataset: instances from JSON or JSONL, their specs, their sources, bad records refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from errand.eval.dataset import load_dataset
from errand.eval.errors import EvalError
from eval.shapes import SPECS, swe_record


def test_instances_from_jsonl_with_test_lists_as_json_strings(tmp_path: Path) -> None:
    (tmp_path / "specs.toml").write_text(SPECS)
    (tmp_path / "data.jsonl").write_text(json.dumps(swe_record()) + "\n")
    dataset = load_dataset(tmp_path / "data.jsonl", specs=tmp_path / "specs.toml")
    instance = dataset.instances[0]
    assert instance.fail_to_pass == ("tests/test_a.py::test_one", "tests/test_b.py::TestB::test_two[x]")
    assert instance.pass_to_pass == ("tests/test_a.py::test_zero",)
    assert instance.test_files == ("tests/test_a.py", "tests/test_b.py")
    assert instance.source == str((tmp_path / "mirror/widgets").resolve())
    assert instance.spec.setup == ("make env",)


def test_the_instance_errand_table_wins_over_the_specs_file(tmp_path: Path) -> None:
    (tmp_path / "specs.toml").write_text(SPECS)
    (tmp_path / "data.json").write_text(json.dumps([swe_record(errand={"test": "tox -e py"})]))
    instance = load_dataset(tmp_path / "data.json", specs=tmp_path / "specs.toml").instances[0]
    assert instance.spec.test == "tox -e py"
    assert instance.spec.setup == ("make env",)


def test_a_mirror_directory_gives_the_source(tmp_path: Path) -> None:
    (tmp_path / "mirror" / "acme__widgets").mkdir(parents=True)
    (tmp_path / "data.json").write_text(json.dumps([swe_record(errand={"test": "pytest"})]))
    instance = load_dataset(tmp_path / "data.json", mirror=tmp_path / "mirror").instances[0]
    assert instance.source == str((tmp_path / "mirror" / "acme__widgets").resolve())


@pytest.mark.parametrize(("record", "code"), [
    (swe_record(FAIL_TO_PASS="not json"), "eval_bad_dataset"),
    ({"instance_id": "x"}, "eval_bad_dataset"),
    (swe_record(errand={"tset": "pytest"}), "eval_bad_specs"),
    (swe_record(repo="other/repo"), "eval_no_spec"),
])
def test_bad_records_are_refused_with_a_code(tmp_path: Path, record: dict[str, object], code: str) -> None:
    (tmp_path / "specs.toml").write_text(SPECS)
    (tmp_path / "data.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(EvalError) as caught:
        load_dataset(tmp_path / "data.jsonl", specs=tmp_path / "specs.toml")
    assert caught.value.code == code
