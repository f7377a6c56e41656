"""The sample dataset shipped with errand: three tiny Python projects, each with a history of
five real bugs fixed one commit at a time, written out as a SWE-bench-format dataset.

:func:`build` makes the repositories with git (nothing is downloaded; setup installs
pytest from the host's package registry settings) and writes ``dataset.jsonl`` and
``specs.toml`` beside them. Instance *i* of a project starts at the commit before
fix *i*: the fixes that come later are in the repository's history, so grading
must strip them from the clone it tests (an agent has read a fix from
``git log --all`` before). The test lists are JSON strings, as SWE-bench's
published datasets carry them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SAMPLE_VERSION", "build", "sample_dir"]

SAMPLE_VERSION = "1"
PYTEST_PIN = "pytest==8.4.2"


@dataclass(frozen=True)
class Fix:
    """One bug and its fix: ``code`` edits (path, old, new) and the test that shows it."""

    statement: str
    code: tuple[tuple[str, str, str], ...]
    test_file: str
    test: str  # a test function's source, appended to ``test_file``

    @property
    def test_name(self) -> str:
        return self.test.split("def ", 1)[1].split("(", 1)[0]


@dataclass(frozen=True)
class Project:
    name: str
    files: dict[str, str]
    fixes: tuple[Fix, ...]


def _pyproject(name: str) -> str:
    return (f'[project]\nname = "{name}"\nversion = "1.0.0"\nrequires-python = ">=3.9"\n\n'
            '[tool.pytest.ini_options]\npythonpath = ["src"]\n')


_GITIGNORE = ".venv/\n__pycache__/\n.pytest_cache/\n"

TALLY = Project("tally", {
    "pyproject.toml": _pyproject("tally"),
    ".gitignore": _GITIGNORE,
    "README.md": "# tally\n\nSums and shares of amounts of money.\n",
    "src/tally/__init__.py": "",
    "src/tally/core.py": '''"""Sums and shares of amounts of money."""


def parse_amount(text):
    """'12.50' or '1,234.50' as a float."""
    return float(text.strip())


def total(amounts):
    """The sum of amounts, to the cent."""
    return round(sum(amounts))


def mean(values):
    """The average of values; 0.0 for none."""
    return sum(values) / len(values)


def percent(part, whole):
    """part as a percentage of whole, to one decimal."""
    return round(part / whole * 100)


def clamp(value, low, high):
    """value kept between low and high."""
    return max(high, min(low, value))
''',
    "tests/test_core.py": '''from tally.core import clamp, mean, parse_amount, percent, total


def test_total_of_whole_amounts():
    assert total([1, 2, 3]) == 6


def test_parse_plain_amount():
    assert parse_amount(" 12.50 ") == 12.5


def test_mean_of_values():
    assert mean([1, 2, 3]) == 2


def test_percent_of_a_quarter():
    assert percent(1, 4) == 25


def test_clamp_above():
    assert clamp(15, 0, 10) == 10
''',
}, (
    Fix("total() drops the cents: total([0.1, 0.2]) gives 0, not 0.3.",
        (("src/tally/core.py", "return round(sum(amounts))", "return round(sum(amounts), 2)"),),
        "tests/test_core.py", "def test_total_keeps_cents():\n    assert total([0.1, 0.2]) == 0.3\n"),
    Fix("parse_amount('1,234.50') raises ValueError: amounts with thousands separators are not read.",
        (("src/tally/core.py", "return float(text.strip())", 'return float(text.strip().replace(",", ""))'),),
        "tests/test_core.py",
        "def test_parse_amount_with_separators():\n    assert parse_amount('1,234.50') == 1234.5\n"),
    Fix("mean([]) raises ZeroDivisionError; the docstring promises 0.0 for no values.",
        (("src/tally/core.py", "return sum(values) / len(values)",
          "return sum(values) / len(values) if values else 0.0"),),
        "tests/test_core.py", "def test_mean_of_nothing():\n    assert mean([]) == 0.0\n"),
    Fix("percent(1, 3) gives 33, but percentages should keep one decimal (33.3).",
        (("src/tally/core.py", "return round(part / whole * 100)", "return round(part / whole * 100, 1)"),),
        "tests/test_percent.py",
        "from tally.core import percent\n\n\ndef test_percent_keeps_one_decimal():\n"
        "    assert percent(1, 3) == 33.3\n"),
    Fix("clamp(5, 0, 10) returns 10: a value inside the bounds is not kept.",
        (("src/tally/core.py", "return max(high, min(low, value))", "return max(low, min(high, value))"),),
        "tests/test_core.py", "def test_clamp_inside():\n    assert clamp(5, 0, 10) == 5\n"),
))

SLUGKIT = Project("slugkit", {
    "pyproject.toml": _pyproject("slugkit"),
    ".gitignore": _GITIGNORE,
    "README.md": "# slugkit\n\nText helpers for URLs and headings.\n",
    "src/slugkit/__init__.py": "",
    "src/slugkit/text.py": '''"""Text helpers for URLs and headings."""

import unicodedata

SMALL_WORDS = {"a", "an", "and", "of", "the", "to", "in"}


def slugify(text):
    """'Hello, World!' -> 'hello-world'."""
    kept = [c if c.isalnum() else " " for c in text]
    return "-".join("".join(kept).split())


def truncate(text, width):
    """text cut to at most width characters, ending in an ellipsis when cut."""
    if len(text) <= width:
        return text
    return text[:width] + "\\u2026"


def title_case(text):
    """Words capitalised; small words lower-case, except the first."""
    words = text.split()
    return " ".join(w.capitalize() if w not in SMALL_WORDS else w for w in words)


def strip_accents(text):
    """'caf\\u00e9' -> 'cafe'."""
    return unicodedata.normalize("NFC", text)


def initials(name):
    """'ada lovelace' -> 'A.L.'."""
    return ".".join(part[0].upper() for part in name.split())
''',
    "tests/test_text.py": '''from slugkit.text import initials, slugify, strip_accents, title_case, truncate


def test_slugify_words():
    assert slugify("plain words") == "plain-words"


def test_truncate_short_text():
    assert truncate("short", 10) == "short"


def test_title_case_small_words():
    assert title_case("war and peace") == "War and Peace"


def test_strip_accents_plain():
    assert strip_accents("plain") == "plain"


def test_initials_start():
    assert initials("ada lovelace").startswith("A")
''',
}, (
    Fix("slugify('Hello, World!') gives 'Hello-World'; slugs must be lower-case.",
        (("src/slugkit/text.py", 'return "-".join("".join(kept).split())',
          'return "-".join("".join(kept).lower().split())'),),
        "tests/test_text.py", "def test_slugify_lowercases():\n    assert slugify('Hello, World!') == 'hello-world'\n"),
    Fix("truncate('abcdef', 4) returns 5 characters: the ellipsis is added past the width.",
        (("src/slugkit/text.py", 'return text[:width] + "\\u2026"', 'return text[:width - 1] + "\\u2026"'),),
        "tests/test_text.py",
        "def test_truncate_fits_the_width():\n    assert truncate('abcdef', 4) == 'abc\\u2026'\n"),
    Fix("title_case('the lord of the rings') leaves the first word lower-case.",
        (("src/slugkit/text.py", "w.capitalize() if w not in SMALL_WORDS else w for w in words",
          "w.capitalize() if i == 0 or w not in SMALL_WORDS else w for i, w in enumerate(words)"),),
        "tests/test_text.py", "def test_title_case_first_word():\n"
        "    assert title_case('the lord of the rings') == 'The Lord of the Rings'\n"),
    Fix("strip_accents('caf\u00e9') returns the accent unchanged.",
        (("src/slugkit/text.py", 'return unicodedata.normalize("NFC", text)',
          'return "".join(c for c in unicodedata.normalize("NFD", text) if not unicodedata.combining(c))'),),
        "tests/test_accents.py", "from slugkit.text import strip_accents\n\n\ndef test_strip_accents_removes_them():\n"
        "    assert strip_accents('caf\\u00e9') == 'cafe'\n"),
    Fix("initials('ada lovelace') gives 'A.L' without the last full stop.",
        (("src/slugkit/text.py", 'return ".".join(part[0].upper() for part in name.split())',
          'return "".join(part[0].upper() + "." for part in name.split())'),),
        "tests/test_text.py", "def test_initials_end_with_a_stop():\n    assert initials('ada lovelace') == 'A.L.'\n"),
))

SPANS = Project("spans", {
    "pyproject.toml": _pyproject("spans"),
    ".gitignore": _GITIGNORE,
    "README.md": "# spans\n\nRanges of numbers and durations.\n",
    "src/spans/__init__.py": "",
    "src/spans/core.py": '''"""Ranges of numbers and durations."""

import re

_UNIT = {"h": 3600, "m": 60, "s": 1}


def overlaps(a, b):
    """Whether the closed ranges a=(start, end) and b share a point."""
    return a[0] < b[1] and b[0] < a[1]


def merge(ranges):
    """Overlapping closed ranges merged, in order."""
    merged = []
    for start, end in ranges:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def parse_duration(text):
    """'1h30m' -> 5400 seconds."""
    match = re.fullmatch(r"(\\d+)([hms])", text)
    if match is None:
        raise ValueError(f"not a duration: {text!r}")
    return int(match.group(1)) * _UNIT[match.group(2)]


def chunks(items, size):
    """items in lists of size; the last may be shorter."""
    return [items[i:i + size] for i in range(0, len(items) - size + 1, size)]


def span_length(a):
    """How many integers the closed range a holds."""
    return a[1] - a[0]
''',
    "tests/test_spans.py": '''import pytest

from spans.core import chunks, merge, overlaps, parse_duration, span_length


def test_overlapping_ranges():
    assert overlaps((1, 5), (3, 8))
    assert not overlaps((1, 2), (5, 6))


def test_merge_sorted():
    assert merge([(1, 3), (2, 5)]) == [(1, 5)]


def test_parse_seconds():
    assert parse_duration("90s") == 90


def test_parse_nonsense():
    with pytest.raises(ValueError):
        parse_duration("soon")


def test_chunks_even():
    assert chunks([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]


def test_span_length_positive():
    assert span_length((1, 4)) > 0
''',
}, (
    Fix("overlaps((1, 2), (2, 3)) is False, but closed ranges that touch share their end point.",
        (("src/spans/core.py", "return a[0] < b[1] and b[0] < a[1]", "return a[0] <= b[1] and b[0] <= a[1]"),),
        "tests/test_spans.py", "def test_touching_ranges_overlap():\n    assert overlaps((1, 2), (2, 3))\n"),
    Fix("merge() of ranges not given in order leaves overlapping ranges unmerged.",
        (("src/spans/core.py", "for start, end in ranges:", "for start, end in sorted(ranges):"),),
        "tests/test_merge.py", "from spans.core import merge\n\n\ndef test_merge_unsorted():\n"
        "    assert merge([(5, 6), (1, 2), (2, 4)]) == [(1, 4), (5, 6)]\n"),
    Fix("parse_duration('1h30m') raises ValueError: durations of several units are refused.",
        (("src/spans/core.py", '''    match = re.fullmatch(r"(\\d+)([hms])", text)
    if match is None:
        raise ValueError(f"not a duration: {text!r}")
    return int(match.group(1)) * _UNIT[match.group(2)]''', '''    parts = re.findall(r"(\\d+)([hms])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(n) * _UNIT[u] for n, u in parts)'''),),
        "tests/test_spans.py", "def test_parse_compound():\n    assert parse_duration('1h30m') == 5400\n"),
    Fix("chunks([1, 2, 3, 4, 5], 2) loses the 5: the shorter last chunk is dropped.",
        (("src/spans/core.py", "range(0, len(items) - size + 1, size)", "range(0, len(items), size)"),),
        "tests/test_spans.py",
        "def test_chunks_keep_the_rest():\n    assert chunks([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]\n"),
    Fix("span_length((3, 3)) is 0, but the closed range holds one integer.",
        (("src/spans/core.py", "return a[1] - a[0]", "return a[1] - a[0] + 1"),),
        "tests/test_spans.py", "def test_span_of_one():\n    assert span_length((3, 3)) == 1\n"),
))

PROJECTS = (TALLY, SLUGKIT, SPANS)


def _spec(name: str) -> str:
    return (f'[repos."errand-eval/{name}"]\nsource = "repos/{name}"\n'
            f'setup = ["python3 -m venv .venv", ".venv/bin/pip install --quiet {PYTEST_PIN}"]\n'
            'setup_registries = ["pip"]\nsetup_key = ["pyproject.toml"]\n'
            'test = ".venv/bin/python -m pytest -p no:cacheprovider -q"\n\n')


def _git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_DATE="2024-01-01T00:00:00Z",
               GIT_COMMITTER_DATE="2024-01-01T00:00:00Z")
    done = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return done.stdout


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _test_ids(root: Path) -> list[str]:
    """Every test function of the checkout's test files, as pytest names them."""
    ids = []
    for path in sorted((root / "tests").glob("test_*.py")):
        for line in path.read_text().splitlines():
            if line.startswith("def test_"):
                ids.append(f"tests/{path.name}::{line[4:].split('(', 1)[0]}")
    return ids


def _build_project(project: Project, root: Path) -> list[dict[str, str]]:
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.name", "errand sample")
    _git(root, "config", "user.email", "sample@errand.invalid")
    _write(root, project.files)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", f"{project.name} 1.0.0")
    _git(root, "tag", "-a", "v1.0.0", "-m", "1.0.0")
    instances = []
    for number, fix in enumerate(project.fixes, start=1):
        base = _git(root, "rev-parse", "HEAD").strip()
        before = set(_test_ids(root))
        for path, old, new in fix.code:
            text = (root / path).read_text()
            assert text.count(old) == 1, (project.name, number, old)
            (root / path).write_text(text.replace(old, new))
        test_path = root / fix.test_file
        test_path.write_text((test_path.read_text() + "\n\n" if test_path.exists() else "") + fix.test)
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", f"Fix: {fix.statement}")
        code_paths = sorted({path for path, _, _ in fix.code})
        touched = {fix.test_file}
        failing = [f"{fix.test_file}::{fix.test_name}"]
        instances.append({
            "instance_id": f"errand-eval__{project.name}-{number}",
            "repo": f"errand-eval/{project.name}",
            "base_commit": base,
            "environment_setup_commit": base,
            "version": "1.0",
            "created_at": "2024-01-01T00:00:00Z",
            "problem_statement": fix.statement,
            "hints_text": "",
            "patch": _git(root, "diff", base, "HEAD", "--", *code_paths),
            "test_patch": _git(root, "diff", base, "HEAD", "--", *sorted(touched)),
            "FAIL_TO_PASS": json.dumps(failing),
            "PASS_TO_PASS": json.dumps(sorted(t for t in before if t.split("::")[0] in touched)),
        })
    return instances


def build(dest: Path) -> Path:
    """Write the sample dataset to ``dest`` (made anew): ``repos/<name>``, ``dataset.jsonl``,
    ``specs.toml``. Returns the dataset file."""
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    records = []
    for project in PROJECTS:
        records += _build_project(project, dest / "repos" / project.name)
    (dest / "specs.toml").write_text("".join(_spec(project.name) for project in PROJECTS))
    dataset = dest / "dataset.jsonl"
    dataset.write_text("".join(json.dumps(record) + "\n" for record in records))
    return dataset


def sample_dir(cache: Path) -> Path:
    """The sample dataset under ``cache``, built on first use; returns its dataset file."""
    root = cache / "eval-sample" / SAMPLE_VERSION
    dataset = root / "dataset.jsonl"
    if not dataset.is_file():
        partial = root.with_name(f"{SAMPLE_VERSION}.{os.getpid()}.partial")
        build(partial)
        if root.exists():
            shutil.rmtree(root)
        os.replace(partial, root)
    return dataset
