"""The system prompt: the working directory, the memory tools only when offered, the project's
instructions and memories only when there are some."""

from __future__ import annotations

from errand.agent.prompt import system_prompt


def test_the_prompt_names_the_working_directory_and_the_tools() -> None:
    prompt = system_prompt("/workspace/repo", None)
    assert "git repository at /workspace/repo, inside a sandbox" in prompt
    for tool in ("shell", "read_file", "edit_file", "write_file", "ask_user", "finish"):
        assert tool in prompt
    assert "recall" not in prompt and "<instructions>" not in prompt and "<memories>" not in prompt


def test_the_memory_tools_are_described_only_when_offered() -> None:
    assert "- recall: search the project's memory" in system_prompt("/w", None, memory_tools=True)


def test_instructions_and_memories_are_given_stripped_and_blank_ones_left_out() -> None:
    prompt = system_prompt("/w", "\n  Run `make test`.\n\n", "  [m-1] (fact) uses tabs\n")
    assert "<instructions>\nRun `make test`.\n</instructions>" in prompt
    assert "<memories>\n[m-1] (fact) uses tabs\n</memories>" in prompt
    assert prompt.index("<instructions>") < prompt.index("<memories>")
    assert system_prompt("/w", " \n\t", "   ") == system_prompt("/w", None)


def test_braces_in_the_project_s_text_are_kept_as_written() -> None:
    prompt = system_prompt("/w/{x}", "Use {workdir} and {} literally.", "{memories}")
    assert "/w/{x}" in prompt and "Use {workdir} and {} literally." in prompt
    assert "<memories>\n{memories}\n</memories>" in prompt
