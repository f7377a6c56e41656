"""How the readiness probe says the Temporal service is away, whatever the SDK raised for it.

The service killed under a client that had connected raised ``tcp connect error`` on an idle
machine, and ``transport error`` in a loaded CI run (the probe's call was under way when the
service went): both are the service unavailable, and both must read as a sentence, not as the
SDK's words. Anything else the SDK raises is not taken for the service being away.
"""

from __future__ import annotations

import pytest
from temporalio.service import RPCError, RPCStatusCode

from errand.server.operator import _temporal_down

AWAY = "the Temporal service does not answer"
REFUSED = ("Failed client connect: Server connection error: tonic::transport::Error(Transport, ConnectError("
           "ConnectError(\"tcp connect error\", Os { code: 111, kind: ConnectionRefused, "
           "message: \"Connection refused\" })))")


@pytest.mark.parametrize(("error", "said"), [
    (RuntimeError(REFUSED), f"{AWAY} (connection refused)"),
    (RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b""), f"{AWAY} (no connection)"),
    (RPCError("transport error", RPCStatusCode.UNAVAILABLE, b""), f"{AWAY} (connection lost)"),
    (RPCError("Namespace errand is not found.", RPCStatusCode.NOT_FOUND, b""), None),
    (RuntimeError("something else"), None),
], ids=["refused at the first connect", "gone, on a connected client", "gone under a call", "an answer", "not the SDK"])
def test_the_temporal_service_away_is_said_in_words(error: Exception, said: str | None) -> None:
    assert _temporal_down(error) == said
