"""Selection beyond one similarity query: withheld instruction text, reserved places, file scopes."""

from __future__ import annotations

from pathlib import Path

from errand.memory import MemoryStore, Provenance, retrieve, sync_instructions
from errand.memory.rules import Activation
from errand.memory.selection import FileScope, named_rules, select, withheld_ids

from .crowded import CONVENTIONS, PITFALL, QUERY

P = "/work/project"

RULES = {
    "AGENTS.md": "# Agents\n\nRun the tests with `make test` before pushing.\n",
    ".cursor/rules/api.mdc": "---\nglobs: src/api/**/*.py\n---\nValidate request bodies with pydantic models.\n",
    ".cursor/rules/money.mdc": "---\ndescription: Rounding money amounts\n---\nUse decimal.Decimal for cents.\n",
    ".cursor/rules/release.mdc": "---\nalwaysApply: false\n---\nBump the version before tagging a release.\n",
    "src/db/AGENTS.md": "Every query goes through db.session(); never raw connections.\n",
}


def _repo(root: Path) -> Path:
    for name, text in RULES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _texts(store: MemoryStore, ids: frozenset[int]) -> set[str]:
    return {store.get(memory_id).text for memory_id in ids}


def test_instruction_text_in_the_prompt_manual_and_glob_rules_are_withheld(
        store: MemoryStore, tmp_path: Path) -> None:
    sync_instructions(store, P, _repo(tmp_path))
    withheld = withheld_ids(store, P, whole={"AGENTS.md"})
    assert _texts(store, withheld.in_prompt) == {"Agents: Run the tests with `make test` before pushing."}
    assert _texts(store, withheld.manual) == {"Bump the version before tagging a release."}
    assert _texts(store, withheld.scoped) == {"Validate request bodies with pydantic models.",
                                              "Every query goes through db.session(); never raw connections."}
    # A requested rule is retrieved by its description, which goes with its text.
    [money] = retrieve(store, P, "round the money amounts", k=1, exclude=withheld.ids)
    assert money.memory.text == "Rounding money amounts: Use decimal.Decimal for cents."
    found = retrieve(store, P, "run the tests before pushing a release", k=8, exclude=withheld.ids)
    assert not {item.memory.id for item in found} & withheld.ids
    assert [m.text for m in named_rules(store, P, "Tag it; see @release and @nothing")] == [
        "Bump the version before tagging a release."]
    assert named_rules(store, P, "mail release@example.com") == []


def test_files_opened_bring_their_rules_and_the_memories_that_cite_them(store: MemoryStore, tmp_path: Path) -> None:
    sync_instructions(store, P, _repo(tmp_path))
    citing = store.add(P, "src/api/users.py caches users per request.", kind="pitfall",
                       provenance=Provenance.person(), status="active")
    by_line = store.add(P, "The retry loop at src/db/pool.py:40 must stay bounded.", kind="pitfall",
                        provenance=Provenance.person(), status="active")
    scoped = store.add(P, "Handlers log the request id.", kind="convention", status="active",
                       provenance=Provenance.person(Activation("globs", ("src/api/**",)).detail()))
    proposed = store.add(P, "src/api/users.py is slow.", kind="fact", provenance=Provenance.person(),
                         status="proposed")
    scope = FileScope.load(store, P, exclude=withheld_ids(store, P, whole={"AGENTS.md"}).never_scoped)
    users = [m.text for m in scope.matching("src/api/users.py")]
    assert users == ["Validate request bodies with pydantic models.", citing.text, scoped.text]
    assert [m.id for m in scope.matching("src/db/pool.py")] == [
        next(m.id for m in scope.matching("src/db/x.py")), by_line.id]
    assert scope.matching("README.md") == [] and proposed.text not in users
    # What the prompt holds whole is never shown again at a file.
    whole = FileScope.load(store, P, exclude=withheld_ids(store, P, whole={"src/db/AGENTS.md"}).never_scoped)
    assert [m.id for m in whole.matching("src/db/pool.py")] == [by_line.id]


def test_pitfalls_keep_reserved_places_among_many_better_matching_conventions(store: MemoryStore) -> None:
    for text in CONVENTIONS:
        store.add(P, text, kind="convention", provenance=Provenance.person(), status="active")
    pitfall = store.add(P, PITFALL, kind="pitfall", provenance=Provenance.person(), status="active")
    query = QUERY
    plain = retrieve(store, P, query, k=8)
    assert pitfall.id not in [item.memory.id for item in plain]  # what one similarity query gives
    picked = select(store, P, query, 8)
    assert len(picked) == 8 and pitfall.id in [item.memory.id for item in picked]
    assert [item.memory.id for item in picked if item.memory.id != pitfall.id] == [
        item.memory.id for item in plain[:7]]  # the lowest ranked convention made room
    assert [item.score for item in picked] == sorted((item.score for item in picked), reverse=True)
    assert [item.memory.id for item in select(store, P, query, 8, reserved=0)] == [item.memory.id for item in plain]
    assert select(store, P, "release notes in the past tense", 8) == []  # nothing relevant: nothing reserved
