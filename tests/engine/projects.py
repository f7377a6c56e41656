"""Realistic projects for task tests: what a user's repository looks like, not a single ``a.py``.

``python_project`` is a ``pyproject.toml`` package built by hatchling with its
version from git tags (hatch-vcs writes ``src/tally/_version.py`` at install),
a pinned test requirement, a ``.gitignore``, a test suite that fails on the
base commit, and the ``errand.toml`` a user would write first: setup makes a
virtualenv in the tree and installs the project editable with its test pins;
the test command runs pytest. ``gold_patch`` is a real fix of it, made with git,
that modifies, adds, deletes and renames files at the top and below.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .harness import git

PYPROJECT = """\
[build-system]
requires = ["hatchling", "hatch-vcs"]
build-backend = "hatchling.build"

[project]
name = "tally"
dynamic = ["version"]
requires-python = ">=3.9"

[tool.hatch.version]
source = "vcs"

[tool.hatch.build.hooks.vcs]
version-file = "src/tally/_version.py"

[tool.hatch.build.targets.wheel]
packages = ["src/tally"]
"""

ERRAND_TOML = """\
[setup]
commands = [
    "python3 -m venv .venv",
    ".venv/bin/pip install --quiet -e . -r requirements-test.txt",
]
network = { registries = ["pip"] }

[test]
command = ".venv/bin/python -m pytest -q"
"""

FILES = {
    "pyproject.toml": PYPROJECT,
    "errand.toml": ERRAND_TOML,
    "requirements-test.txt": "pytest==8.4.2\n",
    ".gitignore": ".venv/\n__pycache__/\n*.egg-info/\nsrc/tally/_version.py\n.pytest_cache/\n",
    "README.md": "# tally\n\nSums receipts. See docs/usage.md.\n",
    "CHANGELOG.md": "# Changes\n\n## 1.4.0\n\n- first release\n",
    "docs/usage.md": "# Usage\n\n    from tally import total\n",
    "AGENTS.md": "Run the tests with `.venv/bin/python -m pytest -q`.\n",
    "src/tally/__init__.py": 'from tally._version import __version__\nfrom tally.core import total\n\n'
                             '__all__ = ["__version__", "total"]\n',
    "src/tally/core.py": "def total(amounts):\n    return round(sum(amounts))\n",
    "tests/test_core.py": "from tally import total\n\n\ndef test_total_keeps_cents():\n"
                          "    assert total([0.1, 0.2]) == 0.3\n\n\ndef test_total_of_nothing():\n"
                          "    assert total([]) == 0\n",
    "tests/test_mean.py": "from tally.stats import mean\n\n\ndef test_mean():\n    assert mean([1, 2, 3]) == 2\n",
    "tests/test_version.py": "import tally\n\n\ndef test_version_comes_from_the_tag():\n"
                             "    assert tally.__version__.startswith('1.4')\n",
}


def python_project(root: Path) -> Path:
    """The project at ``root``, committed on ``main`` and tagged ``v1.4.0``."""
    _written(root, FILES)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "tally 1.4.0")
    git(root, "tag", "-a", "v1.4.0", "-m", "1.4.0")
    return root


def _written(root: Path, files: dict[str, str]) -> None:
    """A new repository at ``root`` on ``main`` holding ``files``, not yet committed."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Test User")
    git(root, "config", "user.email", "user@example.com")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def gold_patch(repo: Path, scratch: Path) -> str:
    """The fix, as ``git diff`` prints it: core.py fixed, stats.py added, CHANGELOG.md deleted,
    docs/usage.md renamed to the top as USAGE.md, README.md edited."""
    clone = scratch / "gold"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True, capture_output=True)
    (clone / "src/tally/core.py").write_text("def total(amounts):\n    return round(sum(amounts), 2)\n")
    (clone / "src/tally/stats.py").write_text("def mean(values):\n    return sum(values) / len(values)\n")
    (clone / "README.md").write_text("# tally\n\nSums receipts. See USAGE.md.\n")
    git(clone, "rm", "-q", "CHANGELOG.md")
    git(clone, "mv", "docs/usage.md", "USAGE.md")
    git(clone, "add", "-A")
    return git(clone, "diff", "--cached", "-M", "HEAD")


NPM_ERRAND_TOML = """\
[setup]
commands = ["npm ci --no-audit --no-fund"]
network = { registries = ["npm"] }

[test]
command = "npm test"
"""

NPM_FILES = {
    "package.json": json.dumps({
        "name": "pricing", "version": "2.1.0", "private": True, "main": "dist/price.js",
        "scripts": {"build": "tsc -p .", "test": "tsc -p . && mocha test/*.test.js"},
        "devDependencies": {"mocha": "11.8.0", "typescript": "5.9.3"},
    }, indent=2) + "\n",
    "tsconfig.json": json.dumps({"compilerOptions": {"target": "ES2020", "module": "commonjs", "strict": True,
                                                     "outDir": "dist", "rootDir": "src"},
                                 "include": ["src"]}, indent=2) + "\n",
    "errand.toml": NPM_ERRAND_TOML,
    ".gitignore": "node_modules/\ndist/\n",
    "README.md": "# pricing\n\nPrices with tax. See docs/api.md.\n",
    "HISTORY.md": "# History\n\n2.1.0: first\n",
    "docs/api.md": "# API\n\n    withTax(cents, rate)\n",
    "src/price.ts": "export function withTax(cents: number, rate: number): number {\n"
                    "  return cents + cents * rate;\n}\n",
    "test/price.test.js": "const assert = require('node:assert');\nconst { withTax } = require('../dist/price');\n"
                          "const { discount } = require('../dist/discount');\n\n"
                          "describe('withTax', () => {\n  it('rounds to whole cents', () => {\n"
                          "    assert.strictEqual(withTax(999, 0.0825), 1081);\n  });\n});\n\n"
                          "describe('discount', () => {\n  it('takes a share off', () => {\n"
                          "    assert.strictEqual(discount(1000, 0.1), 900);\n  });\n});\n",
}


def npm_project(root: Path) -> Path:
    """An npm project with a lockfile (made by npm itself, from the registry the host's npm
    is configured with), a TypeScript build before its mocha suite, failing on the base."""
    _written(root, NPM_FILES)
    subprocess.run(["npm", "install", "--package-lock-only", "--ignore-scripts", "--no-audit", "--no-fund"],
                   cwd=root, check=True, capture_output=True, timeout=600)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "pricing 2.1.0")
    return root


def npm_gold_patch(repo: Path, scratch: Path) -> str:
    """The fix: price.ts rounds, discount.ts added, HISTORY.md deleted, docs/api.md moved to API.md."""
    clone = scratch / "npm-gold"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True, capture_output=True)
    (clone / "src/price.ts").write_text("export function withTax(cents: number, rate: number): number {\n"
                                        "  return Math.round(cents + cents * rate);\n}\n")
    (clone / "src/discount.ts").write_text("export function discount(cents: number, share: number): number {\n"
                                           "  return Math.round(cents * (1 - share));\n}\n")
    (clone / "README.md").write_text("# pricing\n\nPrices with tax. See API.md.\n")
    git(clone, "rm", "-q", "HISTORY.md")
    git(clone, "mv", "docs/api.md", "API.md")
    git(clone, "add", "-A")
    return git(clone, "diff", "--cached", "-M", "HEAD")
