"""The follow-up body the API takes: an attempt is a number, never a JSON true read as 1 (red team)."""

from __future__ import annotations

import pydantic
import pytest

from errand.server.schemas import FollowupIn


@pytest.mark.parametrize("attempt", ["true", "\"2\"", "0", "1.5"])
def test_an_attempt_that_is_not_a_whole_number_from_one_is_refused(attempt: str) -> None:
    with pytest.raises(pydantic.ValidationError):
        FollowupIn.model_validate_json(f'{{"text": "x", "attempt": {attempt}}}')


def test_an_attempt_number_is_taken() -> None:
    assert FollowupIn.model_validate_json('{"text": "x", "attempt": 2}').attempt == 2
    assert FollowupIn.model_validate_json('{"text": "x"}').attempt is None
