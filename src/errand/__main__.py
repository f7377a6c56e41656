"""``python -m errand`` and the ``errand`` command: the command line, its modules imported without
the cyclic collector (errand._startup)."""

from errand import _startup


def main() -> None:
    with _startup.imports():
        from errand.cli import main as run
    run()


if __name__ == "__main__":
    main()
