"""The evaluation layer's errors (under :class:`errand.ErrandError`)::

    ErrandError
    └── ConfigError
        └── EvalError    a dataset, specs or predictions file was refused, or a run
                         directory does not hold what a command needs (exit code 2)
"""

from __future__ import annotations

from errand.errors import ConfigError

__all__ = ["EvalError"]


class EvalError(ConfigError):
    """Bad evaluation input: the file and the record at fault are in the message."""

    code = "eval_invalid"
