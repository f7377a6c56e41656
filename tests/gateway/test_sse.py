"""Server-sent events read as they pass, however the stream is cut."""

from __future__ import annotations

from errand.gateway.sse import EventReader


def test_events_split_anywhere_are_read_whole() -> None:
    stream = b'event: a\ndata: {"x": 1}\n\ndata: [DONE]\r\n\r\n'
    for cut in range(1, len(stream)):
        reader = EventReader()
        assert reader.feed(stream[:cut]) + reader.feed(stream[cut:]) == ['{"x": 1}', "[DONE]"]


def test_an_event_s_data_lines_are_joined_and_its_other_fields_ignored() -> None:
    reader = EventReader()
    assert reader.feed(b": a comment\nevent: delta\nid: 7\ndata: one\ndata:two\n\nevent: ping\n\n") == ["one\ntwo"]
    assert reader.feed(b"data: \xff\n\n") == ["\ufffd"]  # bytes that are not UTF-8 are replaced, never raised


def test_an_unfinished_event_past_the_limit_is_dropped_and_the_next_read() -> None:
    reader = EventReader()
    assert reader.feed(b"data: " + b"x" * (1 << 22)) == []
    assert reader.feed(b"\n\ndata: after\n\n") == ["after"]
