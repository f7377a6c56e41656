"""mini-swe-agent as a task's agent: its pinned package (from the Python registry), its command line,
its trajectory in errand's terms.

Started as ``mini -c mini.yaml -m openai/MODEL -t TASK --yolo --exit-immediately``
over the working copy, its model reached through litellm at ``OPENAI_API_BASE``
(the model gateway's) with the run's token as ``OPENAI_API_KEY``, litellm's price
table read from its package (no fetch) and its cost tracking lenient (errand and
the gateway count the cost). errand's instructions and memories go before the
task in its task text (mini-swe-agent has no other place for them).

It prints for a person, not a program, and nothing a program could read until
it ends; but it writes its trajectory (``-o``) after every step. So errand starts
it under a watcher (:data:`WATCHER`, written into the sandbox) that sends its
output to stderr and, each time the trajectory file has grown, prints the
messages new since the last time as one JSON line; a last line, ``done``, when it
has ended. Its steps reach errand's log as it takes them, and the budgets, the
stuck check and the silence limit see them then: a long run that keeps taking
steps is live, one whose trajectory stops growing (a model that never answers, a
command that never ends) is taken for hung as any CLI that prints nothing is.

The trajectory: ``messages``, each ``assistant`` one a model call with its
``bash`` tool calls, each ``tool`` one a command's result with its
``returncode``, and a last ``exit`` one whose ``exit_status`` is ``Submitted``
when the model ran its submit command (which is left out of the steps: it is
no command of the work).

mini-swe-agent has no MCP client (no module of its package speaks MCP; its one
tool is ``bash``), so errand's tools reach it as a command: :data:`TOOLS`, a short
client of errand's MCP server (the Python standard library's HTTP, the run's token
read from its environment), which its instructions name. Its calls are shell
steps of the log (``python3 /tmp/errand-mini/errand_tools.py ask_person "…"``).
It cannot resume a session: an answer is a new run told the task, the earlier
run's transcript and the answer (:meth:`~errand.agent.external.CliAgent.resume`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from errand.agent.cli import CliAdapter, ModelAccess, Said, SameTools, model_step
from errand.agent.mcp_config import TOOL_SECONDS, URL_ENV, tools_env
from errand.sandbox import Image

__all__ = ["PACKAGE", "TOOLS", "TOOLS_SCRIPT", "VERSION", "WATCHER", "WATCH_SCRIPT", "MiniSweAgent"]

VERSION = "2.4.6"
PACKAGE = f"mini-swe-agent=={VERSION}"
_DIR = "/tmp/errand-mini"
TRAJECTORY = f"{_DIR}/trajectory.json"
WATCHER = f"{_DIR}/watch.py"
TOOLS = f"{_DIR}/errand_tools.py"
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
_SAME_TOOLS: SameTools = {"bash": ("shell", {"command": "command"})}
#: Seconds between the watcher's looks at the trajectory.
POLL_SECONDS = 1.0

WATCH_SCRIPT = f'''"""errand's watcher of mini-swe-agent: its trajectory's new messages, a JSON line as it grows."""
import contextlib, json, os, subprocess, sys

path, model, task = sys.argv[1:4]
os.makedirs(os.path.dirname(path), exist_ok=True)
with contextlib.suppress(FileNotFoundError):
    os.unlink(path)  # an earlier run's
mini = subprocess.Popen(["mini", "-c", "mini.yaml", "-m", model, "-t", task, "--yolo", "--exit-immediately",
                         "-o", path], stdin=subprocess.DEVNULL, stdout=sys.stderr)
sent, seen = 0, None


def send(done):
    global sent, seen
    try:
        stat = os.stat(path)
        if (stat.st_mtime_ns, stat.st_size) == seen and not done:
            return  # not grown: nothing new to read
        with open(path) as file:
            messages = json.load(file).get("messages") or []
        seen = (stat.st_mtime_ns, stat.st_size)
    except (OSError, ValueError):  # not written yet, or being written
        messages = []
    if len(messages) > sent or done:
        print(json.dumps({{"messages": messages[sent:], "done": done, "exit_code": mini.returncode}}), flush=True)
        sent = max(sent, len(messages))


while True:
    try:
        mini.wait({POLL_SECONDS})
    except subprocess.TimeoutExpired:
        send(False)
        continue
    send(True)
    sys.exit(mini.returncode)
'''

TOOLS_SCRIPT = f'''"""errand's tools, for an agent without an MCP client: python3 {TOOLS} TOOL TEXT"""
import json, os, sys, urllib.error, urllib.request

ARGUMENT = {{"ask_person": "question", "recall": "query", "propose_memory": "text"}}
if len(sys.argv) != 3 or sys.argv[1] not in ARGUMENT:
    sys.exit("usage: python3 {TOOLS} ask_person|recall|propose_memory TEXT")
name, text = sys.argv[1:]
call = {{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {{"name": name, "arguments": {{ARGUMENT[name]: text}}}}}}
request = urllib.request.Request(os.environ["{URL_ENV}"], json.dumps(call).encode(), method="POST", headers={{
    "Authorization": "Bearer " + os.environ.get("ERRAND_TOOLS_TOKEN", ""), "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream"}})
opener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))  # errand's server is no proxy's
try:
    with opener.open(request, timeout={TOOL_SECONDS}) as response:
        reply = json.load(response)
except urllib.error.HTTPError as error:
    sys.exit(f"errand's tools refused the call ({{error.code}}): {{error.read().decode(errors='replace')}}")
except OSError as error:
    sys.exit(f"errand's tools could not be reached: {{error}}")
result = reply.get("result") or {{}}
print("\\n".join(part.get("text", "") for part in result.get("content") or []) or reply.get("error"))
sys.exit(1 if result.get("isError") or "error" in reply else 0)
'''

_GUIDE = (f"errand's own tools are commands here: `python3 {TOOLS} ask_person \"QUESTION\"` when you need an answer "
          "only the person can give (then submit at once; the answer comes as a new task), "
          f"`python3 {TOOLS} recall \"QUERY\"` to search what errand remembers of this project, "
          f"`python3 {TOOLS} propose_memory \"FACT\"` to propose a lasting fact for later tasks.")


class MiniSweAgent(CliAdapter):
    """The mini-swe-agent adapter: its trajectory's messages, read as the watcher sends them."""

    kind = "mini-swe-agent"
    provider = "openai"
    protocol = "openai-chat"
    package = PACKAGE
    binary = "mini"
    tools_guide = _GUIDE  # errand's tools as it reaches them: a command, not an MCP server

    def __init__(self, workdir: str = "/workspace") -> None:
        super().__init__(workdir)
        self._seen = 0  # messages of the trajectory read so far
        self._said = ""  # the model's last text
        self._ending: Mapping[str, Any] | None = None  # the exit message's extra, once it came

    @property
    def prefix(self) -> str:
        return "/root/.local"  # pip's --user install, in the layer

    def install(self) -> Image:
        return Image.base().pip_install(self.package)

    def argv(self, prompt: str, system: str, access: ModelAccess, session: str | None) -> list[str]:
        return ["python3", WATCHER, TRAJECTORY, f"openai/{access.model}", f"{system}\n\n{prompt}"]

    def env(self, access: ModelAccess) -> dict[str, str]:
        tools = {URL_ENV: access.tools.url, **tools_env(access.tools)} if access.tools is not None else {}
        return {"OPENAI_API_BASE": access.base_url, "OPENAI_API_KEY": access.token, "MSWEA_CONFIGURED": "true",
                "MSWEA_COST_TRACKING": "ignore_errors", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_COLOR": "1",
                **tools}

    def files(self, access: ModelAccess, system: str) -> dict[str, str]:
        self._seen, self._ending = 0, None  # each invocation is a run of its own, its trajectory anew
        return {WATCHER: WATCH_SCRIPT, **({TOOLS: TOOLS_SCRIPT} if access.tools is not None else {})}

    def translate(self, line: Mapping[str, Any]) -> list[Said]:
        said: list[Said] = []
        for message in line.get("messages") or ():
            if not isinstance(message, Mapping):
                continue
            self._seen += 1
            if message.get("role") == "assistant":
                self._said = str(message.get("content") or "")
                said += self._step(self._seen, message, self._said)
            elif message.get("role") == "tool":
                said += _result(message)
            elif message.get("role") == "exit":
                extra = message.get("extra")
                self._ending = extra if isinstance(extra, Mapping) else {}
        if not line.get("done"):
            return said
        status = self._ending.get("exit_status") if self._ending is not None else None
        ok = status == "Submitted"
        reason = None if ok else (f"it ended {status}" if status else
                                  f"it exited with code {line.get('exit_code')} without an exit status")
        return [*said, Said("result", {"ok": ok, "text": self._said, "usage": None, "reason": reason})]

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
