"""The test Temporal dev server (tests/temporal.py) is the one its test talks to."""

from __future__ import annotations

import pytest

from temporal import TemporalServer, started


@pytest.mark.slow
def test_a_server_whose_port_another_server_holds_is_not_taken_for_serving(temporal_server: TemporalServer) -> None:
    # The port was free when picked, and another session's server bound it first: a client reaches
    # that server, while this one exits. Taken for serving, its test found it gone the moment the
    # other was stopped (a drill's Temporal "refused" for two minutes).
    late = TemporalServer()
    late.port = temporal_server.port
    try:
        with pytest.raises(RuntimeError, match="address already in use"):
            late.start()
    finally:
        late.remove()
    # started() picks other ports then; the one it returns holds its own.
    server = started()
    try:
        assert server.port != temporal_server.port
    finally:
        server.remove()
