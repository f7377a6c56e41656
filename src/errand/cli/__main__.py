"""``python -m errand.cli``: the same as the ``errand`` command."""

from errand.cli.app import main

main()
