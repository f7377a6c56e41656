"""Each event's sentence is written once and both faces show it, every value escaped for the face."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from errand.cli.events import print_event
from errand.server.eventview import render_event
from errand.tasks.events import KINDS
from errand.tasks.records import Event
from errand.tasks.wording import SENTENCES, Value, sentence

HOSTILE = "[bold red]x[/]<script>alert(1)</script>\x1b[2J"


def _event(kind: str, value: object) -> Event:
    data = {field: value for field in KINDS[kind].fields}
    data.update(runs=[value], left_tracked=[value]) if kind in {"round_started", "setup_tree"} else None
    return Event(id=1, seq=1, task_id="t", run_id=None, kind=kind, data=data, time=0.0)


def _terminal(event: Event) -> str:
    out = io.StringIO()
    print_event(Console(file=out, width=400, color_system=None), event)
    return out.getvalue()


def test_both_faces_say_the_same_words() -> None:
    for kind in SENTENCES:
        said = sentence(kind, _event(kind, "value").data)
        if said is None:
            continue
        words = [part for part in said.parts if isinstance(part, str) and len(part) > 3]
        page = str(render_event(_event(kind, "value"))).replace("&#39;", "'")
        for word in words:
            assert word.strip() in _terminal(_event(kind, "value")), (kind, word)
            assert word.strip() in page, (kind, word)


def test_a_hostile_value_is_shown_never_obeyed_in_either_face() -> None:
    for kind in SENTENCES:
        event = _event(kind, HOSTILE)
        said = sentence(kind, event.data)
        if said is None or not any(isinstance(part, Value) for part in said.parts):
            continue
        terminal, page = _terminal(event), str(render_event(event))
        assert "\x1b" not in terminal and "<script>" not in page, kind
        if any(isinstance(part, Value) and part.value == HOSTILE for part in said.parts):
            assert "[bold red]x[/]" in terminal, kind  # Rich did not read it as markup


def test_a_refusal_repeated_is_one_line_with_its_count_and_span() -> None:
    # An installer retrying a host it may not reach printed 48 lines that said the same thing.
    retried = [{"time": 3600 + n, "host": "files.example", "port": 443, "reason": "domain not in the allowlist"}
               for n in range(48)]
    other = {"time": 3630, "host": "10.0.0.1", "port": 80, "reason": "address not in the allowlist"}
    event = Event(id=1, seq=1, task_id="t", run_id=None, kind="egress", time=0.0,
                  data={"role": "setup", "hosts": [], "refused": [*retried[:40], other, *retried[40:]]})
    text = _terminal(event)
    assert "49 refusals" in text
    assert "refused 01:00:00–01:00:47 ×48 files.example:443: domain not in the allowlist" in text
    assert "refused 01:00:30 10.0.0.1:80: address not in the allowlist" in text
    assert text.count("refused ") == 2


def test_a_refusal_at_a_time_no_clock_shows_is_shown_not_a_crash() -> None:
    refused = [{"time": when, "host": "h.test", "port": 443, "reason": "no"} for when in
               (float("inf"), float("nan"), 10**30, -10**30, "soon", 5.5, 5.9)]
    event = Event(id=1, seq=1, task_id="t", run_id=None, kind="egress", time=0.0,
                  data={"role": "agent", "hosts": [], "refused": refused})
    text = _terminal(event)
    assert "refused --:--:-- ×7 h.test:443: no" in text, text
    assert "00:00:05 ×2" in _terminal(Event(id=1, seq=1, task_id="t", run_id=None, kind="egress", time=0.0,
                                            data={"role": "agent", "hosts": [], "refused": refused[-2:]}))
    assert "egress" in str(render_event(event))


@pytest.mark.parametrize("key", ["more_hosts", "more_refused"])
def test_an_egress_count_past_a_float_is_shown_not_a_crash(key: str) -> None:
    # A reviewer's find: JSON reads 400 digits as an int, and math.isfinite overflowed on it.
    data = {"role": "setup", "hosts": [{"host": "a", "port": 1, "connections": 10**400}], key: 10**400,
            "refused": [{"host": "h", "port": 1, "reason": "r", "time": float("inf")}]}
    event = Event(id=1, seq=1, task_id="t", run_id=None, kind="egress", time=0.0, data=data)
    assert "egress" in str(render_event(event))
    assert "refused --:--:-- h:1: r" in _terminal(event)  # not the epoch's 00:00:00
