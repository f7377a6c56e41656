"""The system prompt: the agent's job, its tools, and the project's own instructions."""

from __future__ import annotations

__all__ = ["system_prompt"]

_PROMPT = """\
You are a coding agent working on a task in a git repository at {workdir}, inside a sandbox.
Work only through your tools:
- shell: run a command (tests, builds, git status); output is the exit code and the end of the output.
- read_file / search: look at the code. edit_file: replace exact text. write_file: create or overwrite a file.
- ask_user: if the task is ambiguous, ask one clear question early, after a cheap look at the code.
- finish: when done, say what you changed and how you checked it, and list your assumptions.
Make the smallest change that does the task. Run the project's tests before you finish.
A person may send you messages while you work; follow them."""

_INSTRUCTIONS = """

The project's instructions (AGENTS.md):
<instructions>
{instructions}
</instructions>"""


_MEMORIES = """

What errand remembers about this project, from earlier tasks, reviews and its instruction files. Each
memory has an id and its source; one marked STALE cites something that no longer holds, so check it.
Follow them unless the task says otherwise.
<memories>
{memories}
</memories>"""
_MEMORY_TOOLS = """
- recall: search the project's memory; remember: propose a lasting fact for future tasks (a person reviews it)."""


def system_prompt(workdir: str, instructions: str | None, memories: str | None = None, *,
                  memory_tools: bool = False) -> str:
    prompt = _PROMPT.format(workdir=workdir)
    if memory_tools:
        prompt += _MEMORY_TOOLS
    if instructions and instructions.strip():
        prompt += _INSTRUCTIONS.format(instructions=instructions.strip())
    if memories and memories.strip():
        prompt += _MEMORIES.format(memories=memories.strip())
    return prompt
