"""The gateway's error: one class, under errand's base error.

::

    ErrandError
    └── GatewayError    the model gateway refused a grant or could not serve

``code`` says which: ``grant_exists`` (a live grant already has that id),
``unknown_grant``, ``gateway_stopped``.
"""

from __future__ import annotations

from errand.errors import ErrandError

__all__ = ["GatewayError"]


class GatewayError(ErrandError):
    """The model gateway refused a grant or could not serve."""

    code = "gateway_error"
