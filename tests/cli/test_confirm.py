"""Asking a person to confirm a risky step: ``--yes`` said so beforehand, and off a terminal a refusal
that names the flag and says nothing changed."""

from __future__ import annotations

import pytest
import typer

from errand.cli.confirm import EXIT_NOT_CONFIRMED, confirm


def test_yes_given_beforehand_asks_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    confirm("cancel t-1234", ["it is running"], yes=True)
    assert capsys.readouterr() == ("", "")


def test_off_a_terminal_it_refuses_naming_the_flag_and_the_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as caught:
        confirm("accept t-1234", ["its tests failed", "it deletes 3 files"], yes=False)
    assert caught.value.exit_code == EXIT_NOT_CONFIRMED == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "  • its tests failed\n  • it deletes 3 files\n" in err
    assert ("error: accept t-1234 needs a confirm, and there is no terminal to ask on: pass --yes to do it anyway; "
            "nothing changed\n") in err


def test_the_flag_named_is_the_command_s_own(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit):
        confirm("delete memory 7", yes=False, flag="--force")
    assert "pass --force to do it anyway" in capsys.readouterr().err


def test_what_a_task_said_is_shown_with_its_control_characters_visible(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit):
        confirm("cancel \x1b[2Jt-1", ["title:\x1b]0;owned\x07 done\nnext"], yes=False)
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "owned" in err
