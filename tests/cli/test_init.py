"""``errand init`` in process: the detected errand.toml written and shown, and each refusal one line
on stderr, exit 2, nothing changed."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from errand.cli import app

runner = CliRunner()


def python_repo(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "requirements.txt").write_text("pytest\n")
    (root / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    return root


def test_the_detected_file_is_written_and_shown(tmp_path: Path) -> None:
    repo = python_repo(tmp_path / "repo")
    wrote = runner.invoke(app, ["init", "--repo", str(repo)])
    assert wrote.exit_code == 0, wrote.stderr
    written = (repo / "errand.toml").read_text()
    assert wrote.stdout.startswith(f"wrote {repo.resolve() / 'errand.toml'}:\n") and written in wrote.stdout
    assert "tasks use the errand.toml of their base commit" in wrote.stdout
    assert sorted(p.name for p in repo.iterdir()) == ["errand.toml", "requirements.txt", "tests"]  # no temp file


def test_a_file_there_is_kept_unless_forced(tmp_path: Path) -> None:
    repo = python_repo(tmp_path / "repo")
    (repo / "errand.toml").write_text("# mine\n")
    kept = runner.invoke(app, ["init", "--repo", str(repo)])
    assert kept.exit_code == 2 and "is there already" in kept.stderr and kept.stdout == ""
    assert (repo / "errand.toml").read_text() == "# mine\n"
    assert runner.invoke(app, ["init", "--repo", str(repo), "--force"]).exit_code == 0
    assert (repo / "errand.toml").read_text() != "# mine\n"


def test_a_link_is_replaced_never_written_through(tmp_path: Path) -> None:
    repo = python_repo(tmp_path / "repo")
    (tmp_path / "elsewhere.toml").write_text("# someone else's\n")
    (repo / "errand.toml").symlink_to(tmp_path / "elsewhere.toml")
    assert runner.invoke(app, ["init", "--repo", str(repo)]).exit_code == 2  # a dangling or live link is there
    assert runner.invoke(app, ["init", "--repo", str(repo), "--force"]).exit_code == 0
    assert not (repo / "errand.toml").is_symlink()
    assert (tmp_path / "elsewhere.toml").read_text() == "# someone else's\n"


def test_refusals_change_nothing(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["init", "--repo", str(tmp_path / "missing")])
    assert missing.exit_code == 2 and "is not a directory" in missing.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.md").write_text("hi\n")
    nothing = runner.invoke(app, ["init", "--repo", str(empty)])
    assert nothing.exit_code == 2 and "says how to set it up or test it" in nothing.stderr
    assert sorted(p.name for p in empty.iterdir()) == ["README.md"]
    repo = python_repo(tmp_path / "repo")
    (repo / "errand.toml").mkdir()
    directory = runner.invoke(app, ["init", "--repo", str(repo), "--force"])
    assert directory.exit_code == 2 and "is a directory; errand.toml is a file" in directory.stderr
    assert (repo / "errand.toml").is_dir()
