"""A grant's transcript: every request and reply, with the key and the token never in it."""

from __future__ import annotations

import json

from errand.gateway.transcript import REDACTED, Transcript


def test_the_transcript_never_holds_a_secret(tmp_path) -> None:  # type: ignore[no-untyped-def]
    key, token = 'sk-a"b\\c', "errand-gw-token"
    transcript = Transcript(tmp_path / "t.jsonl", (key, token))
    body = json.dumps({"prompt": f"my token is {token}, the key {key}"}, indent=2).encode()
    transcript.request(1, "POST", f"/v1/x?key={token}", {"x-api-key": token, "x-echo": key}, body, True)
    transcript.reply(1, 200, {}, f"data: {token}\n\n".encode(), False, {"usage": None})
    transcript.close()
    text = (tmp_path / "t.jsonl").read_text()
    assert token not in text and "sk-a" not in text
    assert text.count(REDACTED) == 6
    request, reply = (json.loads(line) for line in text.splitlines())  # one line each, the body kept as JSON
    assert request["body"] == {"prompt": f"my token is {REDACTED}, the key {REDACTED}"}
    assert reply["body"] == f"data: {REDACTED}\n\n"
