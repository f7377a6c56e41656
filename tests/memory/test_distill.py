from __future__ import annotations

from errand.memory import Kind, MemoryStore, Provenance, Source, Status, distill
from errand.memory.distill import PROPOSE_TOOL
from errand.models import Message, ScriptedModel, ToolCall

PROJECT = "/repo/example"

TRAJECTORY = [
    Message("system", "You are errand's agent."),
    Message("user", "Fix the failing date parser."),
    Message("assistant", "", [ToolCall("c1", "run", {"command": "pytest -q"})]),
    Message("tool", "ModuleNotFoundError: No module named 'dateparse'", tool_call_id="c1"),
    Message("assistant", "", [ToolCall("c2", "run", {"command": "pip install -e . && pytest -q"})]),
    Message("tool", "12 passed", tool_call_id="c2"),
    Message("assistant", "Fixed; the package must be installed in editable mode before the tests run."),
]


def propose(*calls: tuple[str, dict[str, object]]) -> ScriptedModel:
    return ScriptedModel([Message("assistant", "", [ToolCall(f"p{i}", name, args)
                                                    for i, (name, args) in enumerate(calls)])], name="scripted:x")


async def test_proposals_are_stored_as_proposed_with_model_provenance(store: MemoryStore) -> None:
    model = propose(
        ("propose_memory", {"kind": "pitfall", "text": "Run `pip install -e .` before `pytest`, or imports fail."}),
        ("propose_memory", {"kind": "command", "text": "The test command is `pytest -q`."}),
    )
    result = await distill(store, PROJECT, "t-42", TRAJECTORY, model, event_id=99)
    assert result.rejected == []
    assert [(m.kind, m.status) for m in result.proposed] == [(Kind.PITFALL, Status.PROPOSED),
                                                            (Kind.COMMAND, Status.PROPOSED)]
    provenance = result.proposed[0].provenance
    assert (provenance.source, provenance.task_id, provenance.detail, provenance.event_id) == \
        (Source.MODEL, "t-42", "scripted:x", 99)
    assert provenance.describe() == "distilled by scripted:x from task t-42 event 99"


async def test_the_model_sees_the_trajectory_known_memories_and_one_tool(store: MemoryStore) -> None:
    store.add(PROJECT, "Docs live in docs/.", kind="fact", provenance=Provenance.person())
    model = propose()
    await distill(store, PROJECT, "t-1", TRAJECTORY, model)
    ((messages, tools),) = model.calls
    assert tools == [PROPOSE_TOOL]
    prompt = messages[-1].content
    assert "Docs live in docs/." in prompt
    assert "Fix the failing date parser." in prompt and "12 passed" in prompt
    assert "-> run({'command': 'pip install -e . && pytest -q'})" in prompt


async def test_bad_and_secret_proposals_are_refused_without_echoing_them(store: MemoryStore) -> None:
    model = propose(
        ("propose_memory", {"kind": "fact", "text": "The deploy key is AKIAIOSFODNN7EXAMPLE"}),
        ("propose_memory", {"kind": "gossip", "text": "Bob wrote this."}),
        ("propose_memory", {"kind": "fact"}),
        ("delete_everything", {}),
    )
    result = await distill(store, PROJECT, "t-2", TRAJECTORY, model)
    assert result.proposed == []
    assert [reason.split(":")[0] for reason in result.rejected] == [
        "secret_refused", "invalid_memory", "kind and text must be strings", "unknown tool 'delete_everything'"]
    assert not any("AKIA" in reason for reason in result.rejected)
    assert store.list_memories(PROJECT) == []


async def test_a_proposal_the_project_already_has_merges(store: MemoryStore) -> None:
    known = store.add(PROJECT, "The test command is `pytest -q`.", kind="command", provenance=Provenance.person())
    result = await distill(store, PROJECT, "t-3", TRAJECTORY,
                           propose(("propose_memory", {"kind": "command", "text": "the test command is pytest -q"})))
    assert [(m.id, m.status, m.evidence) for m in result.proposed] == [(known.id, Status.ACTIVE, 2)]


async def test_a_long_trajectory_keeps_its_start_and_end(store: MemoryStore) -> None:
    middle = [Message("assistant", f"step {n} " + "x" * 1900) for n in range(60)]
    model = propose()
    await distill(store, PROJECT, "t-4", [*TRAJECTORY[:2], *middle, Message("assistant", "the end")], model)
    prompt = model.calls[0][0][-1].content
    assert "Fix the failing date parser." in prompt and "the end" in prompt
    assert "earlier steps left out" in prompt and "step 0 " not in prompt
