"""mini-swe-agent as a task's agent: its pinned package (from the Python registry), its command line,
its trajectory in errand's terms.

Started as ``mini -c mini.yaml -m openai/MODEL -t TASK --yolo --exit-immediately``
over the working copy, its model reached through litellm at ``OPENAI_API_BASE``
(the model gateway's) with the run's token as ``OPENAI_API_KEY``, litellm's price
table read from its package (no fetch) and its cost tracking lenient (errand and
the gateway count the cost). It prints for a person, not a program: what it
prints goes to stderr, and when it ends its trajectory (``-o``) is printed on
stdout as one JSON line, which is read whole. So its steps reach errand's log
when it ends; the time budget and a hang are caught as they happen, the step
budget and the stuck check only then. errand's instructions and memories go
before the task in its task text (mini-swe-agent has no other place for them).

The trajectory: ``messages``, each ``assistant`` one a model call with its
``bash`` tool calls, each ``tool`` one a command's result with its
``returncode``, and a last ``exit`` one whose ``exit_status`` is ``Submitted``
when the model ran its submit command (which is left out of the steps: it is
no command of the work).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from errand.agent.cli import CliAdapter, ModelAccess, Said, SameTools, model_step
from errand.sandbox import Image

__all__ = ["PACKAGE", "VERSION", "MiniSweAgent"]

VERSION = "2.4.6"
PACKAGE = f"mini-swe-agent=={VERSION}"
TRAJECTORY = "/tmp/errand-mini/trajectory.json"
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_SAME_TOOLS: SameTools = {"bash": ("shell", {"command": "command"})}
# mini's output to stderr; then the trajectory as one line on stdout; the exit status mini's own.
_SCRIPT = ('mkdir -p "${0%/*}"; mini -c mini.yaml -m "$1" -t "$2" --yolo --exit-immediately -o "$0" '
           '</dev/null >&2; code=$?; python3 -c "import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))" '
           '"$0" 2>/dev/null; exit $code')


class MiniSweAgent(CliAdapter):
    """The mini-swe-agent adapter: one line, its whole trajectory, read at once."""

    kind = "mini-swe-agent"
    provider = "openai"
    protocol = "openai-chat"
    package = PACKAGE
    binary = "mini"

    @property
    def prefix(self) -> str:
        return "/root/.local"  # pip's --user install, in the layer

    def install(self) -> Image:
        return Image.base().pip_install(self.package)

    def argv(self, prompt: str, system: str, access: ModelAccess, session: str | None) -> list[str]:
        return ["sh", "-c", _SCRIPT, TRAJECTORY, f"openai/{access.model}", f"{system}\n\n{prompt}"]

    def env(self, access: ModelAccess) -> dict[str, str]:
        return {"OPENAI_API_BASE": access.base_url, "OPENAI_API_KEY": access.token, "MSWEA_CONFIGURED": "true",
                "MSWEA_COST_TRACKING": "ignore_errors", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_COLOR": "1"}

    def translate(self, line: Mapping[str, Any]) -> list[Said]:
        messages = [m for m in line.get("messages") or () if isinstance(m, Mapping)]
        said: list[Said] = []
        last = ""
        for index, message in enumerate(messages):
            if message.get("role") == "assistant":
                last = str(message.get("content") or "")
                said += self._step(index, message, last)
            elif message.get("role") == "tool":
                said += _result(message)
        ending = messages[-1].get("extra") if messages and messages[-1].get("role") == "exit" else None
        status = ending.get("exit_status") if isinstance(ending, Mapping) else None
        ok = status == "Submitted"
        return [*said, Said("result", {"ok": ok, "text": last, "usage": None,
                                       "reason": None if ok else f"it ended {status or 'without an exit status'}"})]

    def _step(self, index: int, message: Mapping[str, Any], text: str) -> list[Said]:
        calls = []
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(function, Mapping):
                continue
            try:
                given = json.loads(function.get("arguments") or "{}")
            except ValueError:
                given = {}
            if SUBMIT in str(given.get("command") if isinstance(given, Mapping) else ""):
                continue
            calls.append(self.tool_call(str(call.get("id") or ""), str(function.get("name") or ""), given,
                                        _SAME_TOOLS))
        return [model_step(f"step-{index}", text, calls), *(Said("tool_call", call) for call in calls)]


def _result(message: Mapping[str, Any]) -> list[Said]:
    extra = message.get("extra") if isinstance(message.get("extra"), Mapping) else {}
    assert isinstance(extra, Mapping)
    if extra.get("exception_info") == "action was not executed":
        return []  # the submit command
    call_id = str(message.get("tool_call_id") or "")
    output = str(extra.get("raw_output") or "")
    code = extra.get("returncode") if isinstance(extra.get("returncode"), int) else None
    return [Said("output", {"id": call_id, "text": output}),
            Said("tool_result", {"id": call_id, "name": "shell", "ok": code == 0, "exit_code": code,
                                 "content": output})]
