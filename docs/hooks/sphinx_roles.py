"""A Griffe extension for the API reference: errand's docstrings name objects with Sphinx roles
(``:class:`~errand.forge.Forge```), which mkdocstrings would print as they are written; each
becomes the inline code of the name a reader sees (the last part when the name starts with ``~``)."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|exc|obj|const):`(~?)([\w.]+)(\(\))?`")


def plain(text: str) -> str:
    """``text`` with each Sphinx role written as the inline code of its name."""
    return ROLE.sub(lambda role: f"`{role[2].rsplit('.', 1)[-1] if role[1] else role[2]}{role[3] or ''}`", text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring Griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
