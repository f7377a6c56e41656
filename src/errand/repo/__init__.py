"""errand.repo: git working copies, diffs and accepts.

Git, through the ``git`` command line only: working copies for agents
(:class:`WorkingCopy`), diffs computed without trusting what the agent wrote
(:func:`diff_tree`), and accepting a diff as one commit on a new branch of the
user's repository without touching their checkout (:func:`accept`).
"""

from errand.repo.accept import accept, branch_name, slugify
from errand.repo.diff import Diff, DiffStats, FileChange, diff_tree
from errand.repo.errors import RepoError
from errand.repo.git import run_git
from errand.repo.workcopy import WorkingCopy

__all__ = [
    "Diff", "DiffStats", "FileChange", "RepoError", "WorkingCopy", "accept", "branch_name", "diff_tree", "run_git",
    "slugify",
]
