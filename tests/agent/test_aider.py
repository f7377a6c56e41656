"""aider's transcript, read entry by entry into errand's terms (pure: no sandbox, no aider).

The lines are those errand's wrapper printed around the real aider 0.86.2, driven
against a loopback wire server (the real aider itself runs in
tests/engine/test_aider.py): each entry aider wrote to its chat history, as it
wrote it.
"""

from __future__ import annotations

import json
from typing import Any

from errand.agent.aider import CHAT, INSTRUCTIONS, PRICES, RUNNER, WRAPPER, Aider, edit_blocks
from errand.agent.cli import ModelAccess, Said
from errand.agent.seam import cli_adapter

ACCESS = ModelAccess("http://127.0.0.1:3129/v1", "errand-gw-token", "test-model")
FAILED = ("# 1 SEARCH/REPLACE block failed to match!\n\n## SearchReplaceNoExactMatch: This SEARCH block failed to "
          "exactly match lines in calc.py\n<<<<<<< SEARCH\n    return a * b\n=======\n    return a + b\n>>>>>>> REPLACE"
          "\n\nThe SEARCH section must exactly match an existing block of lines including all white space, comments, "
          "indentation, docstrings, etc")
RUN: list[dict[str, Any]] = [
    {"kind": "notice", "text": "# aider chat started at 2026-12-05 08:52:02"},
    {"kind": "notice", "text": "Update git name with: git config user.name \"Your Name\""},
    {"kind": "notice", "text": "Aider v0.86.2"},
    {"kind": "notice", "text": "Model: openai/test-model with diff edit format"},
    {"kind": "notice", "text": "Git repo: .git with 2 files"},
    {"kind": "notice", "text": "Repo-map: using 1024 tokens, auto refresh"},
    {"kind": "notice", "text": "Added ../../errand-aider/errand.md to the chat (read-only)."},
    {"kind": "user", "text": "#### Make the failing test pass"},
    {"kind": "reply", "text": "add() in calc.py subtracts: please add calc.py to the chat."},
    {"kind": "notice", "text": "Tokens: 2.1k sent, 16 received."},
    {"kind": "notice", "text": "calc.py"},
    {"kind": "notice", "text": "Add file to the chat? (Y)es/(N)o/(D)on't ask again [Yes]: y"},
    {"kind": "reply", "text": "add() subtracts.\n\ncalc.py\n```python\n<<<<<<< SEARCH\n    return a * b\n=======\n"
                              "    return a + b\n>>>>>>> REPLACE\n```"},
    {"kind": "notice", "text": "Tokens: 2.1k sent, 32 received."},
    {"kind": "error", "text": "The LLM did not conform to the edit format."},
    {"kind": "notice", "text": "https://aider.chat/docs/troubleshooting/edit-errors.html"},
    {"kind": "notice", "text": FAILED},
    {"kind": "reply", "text": "calc.py\n```python\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n"
                              ">>>>>>> REPLACE\n```\n\nadd() subtracted; now it adds, and the test passes.\n\n"
                              "Assumptions:\n- only add() was wrong"},
    {"kind": "notice", "text": "Tokens: 2.2k sent, 52 received."},
    {"kind": "notice", "text": "Applied edit to calc.py"},
    {"kind": "exit", "code": 0},
]


def read(adapter: Aider, lines: list[dict[str, Any]]) -> list[Said]:
    return [said for line in lines for said in adapter.translate(line)]


def test_aider_is_a_kind_installed_from_the_python_registry_pinned() -> None:
    aider = cli_adapter("aider", workdir="/workspace")
    assert isinstance(aider, Aider) and aider.prefix == "/root/.local"
    [step] = [s for s in aider.install().steps if s.kind == "run"]
    assert "aider-chat==0.86.2" in step.args[0] and step.network == "pip"


def test_its_command_line_reaches_the_gateway_with_the_token_only_in_its_environment() -> None:
    aider = Aider("/workspace")
    argv = aider.argv("fix it", "Be brief.", ACCESS, None)
    assert argv[:2] == ["python3", RUNNER] and argv[-2:] == ["--message", "fix it"]
    assert argv[argv.index("--model") + 1] == "openai/test-model"
    assert argv[argv.index("--openai-api-base") + 1] == "http://127.0.0.1:3129/v1"
    assert argv[argv.index("--edit-format") + 1] == "diff" and argv[argv.index("--read") + 1] == INSTRUCTIONS
    # Nothing of aider's in the working copy, no commit, no lookup.
    for flag in ("--no-gitignore", "--no-auto-commits", "--no-dirty-commits", "--no-check-update",
                 "--analytics-disable", "--yes-always"):
        assert flag in argv
    for flag in ("--input-history-file", "--chat-history-file"):
        assert argv[argv.index(flag) + 1].startswith("/tmp/errand-aider/")
    assert "errand-gw-token" not in " ".join(argv) and aider.env(ACCESS)["OPENAI_API_KEY"] == "errand-gw-token"
    assert aider.env(ACCESS)["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    # A session goes on from its chat history.
    assert "--restore-chat-history" in aider.argv("more", "", ACCESS, CHAT)
    assert "--restore-chat-history" not in argv


def test_its_files_are_the_wrapper_the_instructions_and_a_seeded_price_table_out_of_the_tree() -> None:
    files = Aider("/workspace").files(ACCESS, "Be brief.")
    assert files[RUNNER] == WRAPPER and files[INSTRUCTIONS] == "Be brief.\n"
    assert json.loads(files[PRICES])  # not empty: aider fetches the table when its cache is empty
    assert not any(path.startswith("/workspace") for path in files)
    assert 'TAGS_CACHE_DIR = "/tmp/errand-aider/' in WRAPPER
    compile(WRAPPER, RUNNER, "exec")


def test_a_run_reads_as_its_replies_with_their_edits_and_how_each_went() -> None:
    said = read(Aider("/workspace"), RUN)
    assert said[0] == Said("session", {"id": CHAT})
    steps = [s for s in said if s.kind == "model"]
    assert [s.data["content"] for s in steps] == [
        "add() in calc.py subtracts: please add calc.py to the chat.", "add() subtracts.",
        "add() subtracted; now it adds, and the test passes.\n\nAssumptions:\n- only add() was wrong"]
    assert all(s.usage is None for s in steps)  # its rounded figures are not counts: the gateway's are
    calls = [s.data for s in said if s.kind == "tool_call"]
    assert calls == [
        {"id": "reply-2-edit-1", "name": "edit_file",
         "arguments": {"path": "calc.py", "old": "    return a * b", "new": "    return a + b"}},
        {"id": "reply-3-edit-1", "name": "edit_file",
         "arguments": {"path": "calc.py", "old": "    return a - b", "new": "    return a + b"}}]
    assert [c["id"] for c in steps[1].data["tool_calls"]] == ["reply-2-edit-1"]
    results = [(s.data["id"], s.data["ok"], s.data["content"]) for s in said if s.kind == "tool_result"]
    assert results == [("reply-2-edit-1", False, FAILED), ("reply-3-edit-1", True, "Applied edit to calc.py")]
    assert said[-1] == Said("result", {"ok": True, "reason": None, "usage": None, "text": steps[-1].data["content"]})


def test_an_error_after_its_last_reply_ends_the_run_with_aiders_words() -> None:
    said = read(Aider("/workspace"), [
        *RUN[:8], {"kind": "error", "text": "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit"},
        {"kind": "notice", "text": "Retrying in 0.2 seconds..."}, RUN[8],
        {"kind": "error", "text": "litellm.BadRequestError: OpenAIException - errand gateway: this task's "
                                  "its token budget is spent (5,000 of 5,000 tokens)"},
        {"kind": "exit", "code": 0}])
    [result] = [s for s in said if s.kind == "result"]
    assert result.data["ok"] is False and "its token budget is spent" in result.data["reason"]
    assert "RateLimitError" not in result.data["reason"]  # retried: a reply came after it
    never = read(Aider("/workspace"), [*RUN[:8], {"kind": "error", "text": "litellm.APIConnectionError: refused"},
                                       {"kind": "exit", "code": 0}])
    assert never[-1].data["ok"] is False and never[-1].data["reason"] == "litellm.APIConnectionError: refused"


def test_some_blocks_applied_and_one_failed_read_each_as_it_went() -> None:
    reply = ("Two changes.\n\ncalc.py\n```python\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n"
             ">>>>>>> REPLACE\n```\n\ncalc.py\n```python\n<<<<<<< SEARCH\n    return x + x + 1\n=======\n"
             "    return 2 * x\n>>>>>>> REPLACE\n```\n\nDone.")
    failed = ("# 1 SEARCH/REPLACE block failed to match!\n\n## SearchReplaceNoExactMatch: This SEARCH block failed "
              "to exactly match lines in calc.py\n<<<<<<< SEARCH\n    return x + x + 1\n=======\n    return 2 * x\n"
              ">>>>>>> REPLACE\n\nThe other 1 SEARCH/REPLACE block were applied successfully.\nDon't re-send them.")
    said = read(Aider("/workspace"), [RUN[7], {"kind": "reply", "text": reply}, {"kind": "notice", "text": failed}])
    assert [s.data["content"] for s in said if s.kind == "model"] == ["Two changes.\n\nDone."]
    assert [(s.data["id"], s.data["ok"]) for s in said if s.kind == "tool_result"] == [
        ("reply-1-edit-1", True), ("reply-1-edit-2", False)]


def test_edit_blocks_take_the_path_before_each_block_or_the_one_before() -> None:
    text = ("src/app.py\n```\n<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE\n<<<<<<< SEARCH\n\n=======\nmore\n"
            ">>>>>>> REPLACE\n```\nnew_file.py\n```python\n<<<<<<< SEARCH\n=======\nprint(1)\n>>>>>>> REPLACE\n```")
    assert edit_blocks(text) == [("src/app.py", "old", "new"), ("src/app.py", "", "more"),
                                 ("new_file.py", "", "print(1)")]
    assert edit_blocks("<<<<<<< SEARCH\nunended") == []


def test_an_absolute_path_is_named_relative_to_the_working_copy() -> None:
    said = read(Aider("/workspace"), [RUN[7], {"kind": "reply", "text": "/workspace/calc.py\n```\n<<<<<<< SEARCH\na\n"
                                                                         "=======\nb\n>>>>>>> REPLACE\n```"},
                                      {"kind": "notice", "text": "Applied edit to /workspace/calc.py"}])
    assert [s.data["arguments"]["path"] for s in said if s.kind == "tool_call"] == ["calc.py"]
    assert [s.data["ok"] for s in said if s.kind == "tool_result"] == [True]


def test_a_provider_that_refuses_it_ends_the_run_with_litellms_error_and_aiders_words() -> None:
    said = read(Aider("/workspace"), [
        *RUN[:8],
        {"kind": "notice", "text": "litellm.AuthenticationError: AuthenticationError: OpenAIException - Incorrect "
                                   "API key provided: sk-proj-***"},
        {"kind": "error", "text": "The API provider is not able to authenticate you. Check your API key."},
        {"kind": "exit", "code": 0}])
    assert said[-1] == Said("result", {"ok": False, "text": "", "usage": None, "reason": (
        "litellm.AuthenticationError: AuthenticationError: OpenAIException - Incorrect API key provided: sk-proj-***; "
        "The API provider is not able to authenticate you. Check your API key.")})


def test_its_lint_report_is_the_output_of_the_edit_it_checked() -> None:
    lint = ("# Fix any errors below, if possible.\n\nTraceback (most recent call last):\nFile \"/workspace/calc.py\", "
            "line 2\nreturn a +\n^\nSyntaxError: invalid syntax\n\n## Running: /usr/bin/python3 -m flake8 "
            "--select=E9,F821,F823,F831,F406,F407,F701,F702,F704,F706 --show-source --isolated calc.py\n\n"
            "calc.py:2:16: E999 SyntaxError: invalid syntax\nreturn a +\n\n^\n\n## See relevant line below marked "
            "with \u2588.\n\ncalc.py:\n1\u2502def add(a, b):\n2\u2588    return a +")
    said = read(Aider("/workspace"), [
        RUN[7], {"kind": "reply", "text": "add() subtracts.\n\ncalc.py\n```python\n<<<<<<< SEARCH\n    return a - b\n"
                                          "=======\n    return a +\n>>>>>>> REPLACE\n```"},
        {"kind": "notice", "text": "Tokens: 2.1k sent, 30 received."},
        {"kind": "notice", "text": "Applied edit to calc.py"}, {"kind": "notice", "text": lint},
        {"kind": "notice", "text": "Attempt to fix lint errors? (Y)es/(N)o [Yes]: y"}])
    assert [(s.kind, s.data["id"]) for s in said if s.kind in ("tool_result", "output")] == [
        ("tool_result", "reply-1-edit-1"), ("output", "reply-1-edit-1")]
    assert said[-1].data["text"] == lint + "\n"
