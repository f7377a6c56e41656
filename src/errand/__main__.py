"""``python -m errand``: the command line."""

from errand.cli import main

main()
