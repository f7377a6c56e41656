"""The command line's tests drive tasks as the engine's tests do: the same repository,
store, model script and errand home."""

from engine.conftest import errand_home, repo, script_file, service, store  # noqa: F401 - fixtures
