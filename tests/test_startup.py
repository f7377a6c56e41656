"""A process's imports run without the cyclic collector, and what they made is frozen after."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from errand import _startup


def test_the_collector_is_off_inside_and_back_on_after_with_what_was_made_frozen() -> None:
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with _startup.imports():
        assert not gc.isenabled()
        made = [[n] for n in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(made)


def test_a_failing_import_still_turns_the_collector_back_on() -> None:
    with pytest.raises(ImportError), _startup.imports():
        import errand.no_such_module  # noqa: F401
    assert gc.isenabled()


def test_a_collector_turned_off_before_stays_off() -> None:
    gc.disable()
    try:
        with _startup.imports():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_command_runs_its_commands_with_the_collector_on() -> None:
    shown = subprocess.run([sys.executable, "-c", "import gc; from errand.cli.app import app; "
                            "app.command('probe')(lambda: print(gc.isenabled(), gc.get_freeze_count() > 0)); "
                            "import errand.__main__; errand.__main__.main()", "probe"],
                           capture_output=True, text=True, check=False)
    assert shown.stdout.split() == ["True", "True"], shown.stderr
