"""Replies of the two wires provider_wire does not speak: the OpenAI Responses API and Gemini."""

from __future__ import annotations

from typing import Any


def responses_usage(prompt: int, output: int, cached: int = 0) -> dict[str, Any]:
    return {"input_tokens": prompt, "output_tokens": output, "total_tokens": prompt + output,
            "input_tokens_details": {"cached_tokens": cached}, "output_tokens_details": {"reasoning_tokens": 0}}


def response(text: str, usage: dict[str, Any] | None, status: str = "completed") -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "created_at": 0, "status": status, "model": "gpt-4.1",
            "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}] if text else [],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "usage": usage}


def response_events(text: str, usage: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """created, one text delta, completed (with the usage), as the Responses API streams them."""
    return [("response.created", {"type": "response.created", "sequence_number": 0,
                                  "response": response("", None, "in_progress")}),
            ("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 1,
                                            "item_id": "msg_1", "output_index": 0, "content_index": 0,
                                            "delta": text, "logprobs": []}),
            ("response.completed", {"type": "response.completed", "sequence_number": 2,
                                    "response": response(text, usage)})]


def gemini_usage(prompt: int, output: int) -> dict[str, Any]:
    return {"promptTokenCount": prompt, "candidatesTokenCount": output, "totalTokenCount": prompt + output}


def gemini_chunks(text: str, usage: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """Two chunks, each with the usage so far; the last one ends the candidate."""
    half = len(text) // 2
    first = {"promptTokenCount": usage["promptTokenCount"], "candidatesTokenCount": 1}
    return [(None, {"candidates": [{"content": {"role": "model", "parts": [{"text": text[:half]}]}, "index": 0}],
                    "usageMetadata": first}),
            (None, {"candidates": [{"content": {"role": "model", "parts": [{"text": text[half:]}]},
                                    "finishReason": "STOP", "index": 0}], "usageMetadata": usage})]
