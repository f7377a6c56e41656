"""An adapter's setting: the argument, then errand's variable, then nothing (the SDK's own default)."""

from __future__ import annotations

import pytest

from errand.models._settings import resolve

VARIABLE = "ERRAND_TEST_SETTING_URL"


def test_the_argument_wins_over_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, "http://from-the-environment.invalid")
    assert resolve("http://given.invalid", VARIABLE) == "http://given.invalid"
    assert resolve("", VARIABLE) == ""  # given, even empty: the caller said so


def test_the_variable_when_no_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, "http://from-the-environment.invalid")
    assert resolve(None, VARIABLE) == "http://from-the-environment.invalid"


def test_an_unset_or_empty_variable_leaves_it_to_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VARIABLE, raising=False)
    assert resolve(None, VARIABLE) is None
    monkeypatch.setenv(VARIABLE, "")
    assert resolve(None, VARIABLE) is None
