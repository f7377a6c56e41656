"""The memory layer's errors: each refusal is a class of its own under one base to branch on, with
its ``.code`` and the memory it names, and nothing changes when one is raised."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from errand.errors import ErrandError
from errand.memory import InvalidMemory, MemoryNotFound, MemoryStore, MemoryStoreError, Provenance, SecretRefused
from errand.memory.secretscan import check_no_secret

PROJECT = "/repo/example"


def test_an_unknown_id_is_not_found_by_every_operation_and_names_the_id(lexical_store: MemoryStore) -> None:
    kept = lexical_store.add(PROJECT, "Run the tests with `make check`.", kind="command",
                             provenance=Provenance.person())
    operations: list[Callable[[], object]] = [lambda: lexical_store.get(404), lambda: lexical_store.approve(404),
                                              lambda: lexical_store.edit(404, text="x"),
                                              lambda: lexical_store.remove(404)]
    for operation in operations:
        with pytest.raises(MemoryNotFound) as missing:
            operation()
        assert missing.value.memory_id == 404 and missing.value.code == "memory_not_found"
        assert "404" in missing.value.message
    with pytest.raises(MemoryNotFound) as missing:
        lexical_store.record_use("t-1", [kept.id, 9, 7])
    assert missing.value.memory_id == 7  # the smallest id not found; the uses of the others not recorded either
    assert lexical_store.use_counts([kept.id]).get(kept.id, {}).get("given", 0) == 0


def test_the_layer_s_refusals_are_caught_as_its_base_and_as_errand_s_with_codes_of_their_own(
        lexical_store: MemoryStore) -> None:
    refusals: list[MemoryStoreError] = []
    bad: list[Callable[[], object]] = [
        lambda: lexical_store.add(PROJECT, "  ", kind="fact", provenance=Provenance.person()),
        lambda: lexical_store.record_use("t-1", [1], how="skimmed"),
        lambda: lexical_store.get(1),
        lambda: check_no_secret("token: ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2)]
    for refusal in bad:
        with pytest.raises(ErrandError) as caught:
            refusal()
        assert isinstance(caught.value, MemoryStoreError)
        refusals.append(caught.value)
    assert [(type(e), e.code) for e in refusals] == [
        (InvalidMemory, "empty_memory"), (InvalidMemory, "invalid_use"), (MemoryNotFound, "memory_not_found"),
        (SecretRefused, "secret_refused")]
    assert lexical_store.list_memories(PROJECT) == []


def test_a_refused_secret_names_its_detector_and_never_echoes_the_text() -> None:
    secret = "ghp_" + "Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz9Xc8"
    with pytest.raises(SecretRefused) as refused:
        check_no_secret(f"push with {secret}")
    assert refused.value.detector and refused.value.memory_id is None
    assert secret not in refused.value.message and secret not in str(refused.value)
    assert "environment variable" in refused.value.message  # what to do instead
    check_no_secret("the token lives in $GITHUB_TOKEN")  # a secret's name is no secret
