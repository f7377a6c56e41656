from __future__ import annotations

import json

import pytest

from errand.memory import MemoryStore, Provenance, Status
from errand.memory.conflicts import conflict
from errand.memory.consolidate import consolidate
from errand.models import ScriptedModel

PROJECT = "/repo/example"

# Pairs that share nearly every word and say different things: merging one into the other loses a fact.
DIFFERENT_FACTS = [
    ("Tests must run with `--no-network` on CI.", "Tests must not run with `--no-network` on CI."),
    ("The API listens on 8080 and the web app on 3000.", "The API listens on 3000 and the web app on 8080."),
    ("Run the migrations, then seed the database.", "Seed the database, then run the migrations."),
    ("The project needs Node 18 to build.", "The project needs Node 20 to build."),
    ("Start `redis` before `postgres` in development.", "Start `postgres` before `redis` in development."),
]


def add(store: MemoryStore, text: str) -> int:
    return store.add(PROJECT, text, kind="fact", provenance=Provenance.person()).id


@pytest.mark.parametrize(("first", "second"), DIFFERENT_FACTS)
def test_texts_that_differ_in_negation_numbers_or_order_are_both_kept(lexical_store: MemoryStore, first: str,
                                                                      second: str) -> None:
    assert conflict(first, second) is not None
    assert add(lexical_store, first) != add(lexical_store, second)
    assert {memory.text for memory in lexical_store.list_memories(PROJECT)} == {first, second}


def test_a_repeat_in_other_words_still_merges(lexical_store: MemoryStore) -> None:
    first = add(lexical_store, "Run the tests with `pytest -q` before pushing.")
    assert add(lexical_store, "Run tests with `pytest -q` before pushing") == first
    assert lexical_store.get(first).evidence == 2


def answer(action: str, memory_id: int | None, text: str, reason: str) -> ScriptedModel:
    return ScriptedModel([json.dumps({"action": action, "id": memory_id, "text": text, "reason": reason})],
                         name="scripted:judge")


async def test_a_model_supersedes_a_changed_fact_with_its_reason_in_provenance(lexical_store: MemoryStore) -> None:
    old = add(lexical_store, "The API listens on port 8080 in development.")
    model = answer("SUPERSEDE", old, "The API listens on port 9090 in development.", "the port was changed")
    stored, decision = await consolidate(lexical_store, PROJECT, "The API listens on port 9090 in development.",
                                         kind="fact", provenance=Provenance.task("t-1"), model=model)
    assert decision.action == "SUPERSEDE" and stored.supersedes == old
    assert lexical_store.get(old).status is Status.ARCHIVED
    assert stored.provenance.detail == f"SUPERSEDE memory {old} by scripted:judge: the port was changed"
    shown = model.calls[0][0][1].content
    assert f"id {old}: The API listens on port 8080" in shown and "NEW: The API listens on port 9090" in shown


async def test_a_model_updates_or_notes_a_repeat_and_adds_a_new_fact(lexical_store: MemoryStore) -> None:
    old = add(lexical_store, "Lint with ruff.")
    better = "Lint with `ruff check .`; CI fails on any warning."
    updated, _ = await consolidate(lexical_store, PROJECT, "Lint the code with ruff before pushing.", kind="command",
                                   provenance=Provenance.person(), model=answer("UPDATE", old, better, "more exact"))
    assert updated.id == old and updated.text == better and "UPDATE memory" in (updated.provenance.detail or "")
    same, decision = await consolidate(lexical_store, PROJECT, "Use ruff to lint.", kind="command",
                                       provenance=Provenance.person(),
                                       model=answer("NOOP", old, "", "already known"))
    assert decision.action == "NOOP" and same.id == old and len(lexical_store.list_memories(PROJECT)) == 1
    added, _ = await consolidate(lexical_store, PROJECT, "Ruff's line length is 120.", kind="convention",
                                 provenance=Provenance.person(), model=answer("ADD", None, "", "a different fact"))
    assert added.id != old and added.text == "Ruff's line length is 120."
    assert added.provenance.detail == "ADD by scripted:judge: a different fact"


async def test_an_unusable_decision_falls_back_to_the_stores_rules(lexical_store: MemoryStore) -> None:
    old = add(lexical_store, "Tests must run with `--no-network` on CI.")
    for reply in ("I think these are the same.", json.dumps({"action": "NOOP", "id": old + 99, "reason": "?"})):
        stored, decision = await consolidate(lexical_store, PROJECT, "Tests must not run with `--no-network` on CI.",
                                             kind="fact", provenance=Provenance.person(),
                                             model=ScriptedModel([reply]))
        assert decision.action == "ADD" and stored.id != old
