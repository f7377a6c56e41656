from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from errand.errors import ConfigError
from errand.memory import E5Embedder, default_embedder, embedders
from errand.sandbox._backends.cgroups import Cgroup, Limits


def test_vectors_are_unit_length_and_meaningful(embedder: E5Embedder) -> None:
    vectors = embedder.embed(["Run the unit tests with pytest.", "The cat sat on the mat.", ""])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:2], axis=1), 1.0, atol=1e-3)
    query = embedder.embed(["how do I run the tests"], query=True)[0]
    assert float(vectors[0] @ query) > float(vectors[1] @ query)
    assert embedder.embed([]).shape == (0, 384)


def test_loading_leaves_the_environment_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    E5Embedder().embed(["load it"])
    assert "GOMP_SPINCOUNT" not in os.environ and os.environ["OMP_NUM_THREADS"] == "7"


def test_every_call_runs_on_the_embedders_one_thread(embedder: E5Embedder) -> None:
    """OpenMP gives each calling thread a team of its own; the embedder must be the only caller."""
    embedder.embed(["load it"])
    embedder.forget()  # each text below goes to the model, whatever the session embedded before
    model, seen = embedder._model, set()

    class Recording:
        def query(self, text: str) -> object:
            seen.add(threading.get_ident())
            return model.query(text)

        def passage(self, text: str) -> object:
            seen.add(threading.get_ident())
            return model.passage(text)

        def token_count(self, text: str, is_query: bool) -> int:
            return int(model.token_count(text, is_query))

    embedder._model = Recording()
    try:
        with ThreadPoolExecutor(max_workers=4) as callers:
            results = list(callers.map(lambda n: embedder.embed([f"text {n}"], query=n % 2 == 0), range(16)))
    finally:
        embedder._model = model
    assert len(seen) == 1 and threading.get_ident() not in seen
    assert all(result.shape == (1, 384) for result in results)


def test_the_thread_count_does_not_change_the_vectors(embedder: E5Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = ["Run the unit tests with pytest -q before you push.", "how do I run the tests"]
    vectors = {}
    for threads in sorted({1, embedders.MAX_THREADS}):
        monkeypatch.setattr(embedders, "idle_cores", lambda threads=threads: threads)
        embedder.forget()  # made anew by the model, not the vectors kept from the last round
        vectors[threads] = embedder.embed(texts)
    first, *others = vectors.values()
    assert all(np.allclose(first, other, atol=1e-5) for other in others)


class Counting:
    """The embedder's model, counting the texts given to it."""

    def __init__(self, model: object) -> None:
        self.model = model
        self.given: list[str] = []

    def query(self, text: str) -> object:
        self.given.append("query: " + text)
        return self.model.query(text)  # type: ignore[attr-defined]

    def passage(self, text: str) -> object:
        self.given.append("passage: " + text)
        return self.model.passage(text)  # type: ignore[attr-defined]

    def token_count(self, text: str, is_query: bool) -> int:
        return int(self.model.token_count(text, is_query))  # type: ignore[attr-defined]


def test_a_text_embedded_again_is_not_given_to_the_model_again() -> None:
    embedder = E5Embedder()
    counting = Counting(embedder._load())
    embedder._model = counting
    first = embedder.embed(["Run the tests with pytest.", "The cat sat on the mat."])
    first[0] *= 0  # the caller's copy: what the embedder keeps is not changed through it
    again = embedder.embed(["The cat sat on the mat.", "Run the tests with pytest."])
    asked = embedder.embed(["Run the tests with pytest."], query=True)  # a query is embedded apart
    assert counting.given == ["passage: Run the tests with pytest.", "passage: The cat sat on the mat.",
                              "query: Run the tests with pytest."]
    assert np.array_equal(again[0], first[1]) and np.allclose(np.linalg.norm(again, axis=1), 1.0, atol=1e-3)
    assert not np.allclose(asked[0], again[1], atol=1e-3)


def test_a_query_is_kept_by_the_tokens_the_model_reads() -> None:
    embedder = E5Embedder()
    counting = Counting(embedder._load())
    embedder._model = counting
    sentence = "add a time zone column to the accounts table and show it on the profile page"
    longer, other = " ".join([sentence] * 4), " ".join([sentence] * 5)  # both past the limit, alike at first
    first, second = embedder.embed([longer, other], query=True)
    assert len(counting.given) == 1 and np.array_equal(first, second)
    embedder.max_query_tokens = 8  # fewer tokens read: another input to the model, not the kept vector
    fewer = embedder.embed([longer], query=True)[0]
    assert len(counting.given) == 2 and not np.allclose(fewer, first, atol=1e-3)


def test_the_vectors_kept_are_the_most_recently_used_few(monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = E5Embedder()
    counting = Counting(embedder._load())
    embedder._model = counting
    monkeypatch.setattr(embedder, "remembered", 2)
    embedder.embed(["one", "two", "one", "three"])  # "one" is used again before "three" comes: "two" goes
    embedder.embed(["one", "three", "two"])
    assert counting.given == ["passage: one", "passage: two", "passage: three", "passage: two"]
    assert len(embedder._vectors) == 2
    embedder.forget()
    embedder.embed(["one"])
    assert counting.given[-1] == "passage: one" and len(counting.given) == 5


def test_idle_cores_counts_other_processes_running_on_every_core() -> None:
    assert 1 <= embedders.idle_cores() <= embedders.MAX_THREADS
    cores = len(os.sched_getaffinity(0))
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        for burner in burners:  # each has started spinning once it has used some CPU time
            while int(Path(f"/proc/{burner.pid}/stat").read_text().rsplit(")", 1)[1].split()[11]) == 0:
                time.sleep(0.01)
        assert [embedders.idle_cores() for _ in range(20)] == [1] * 20
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def test_default_embedder_is_one_per_process() -> None:
    assert default_embedder("e5") is default_embedder("e5")


def test_default_embedder_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_EMBEDDER", "none")
    assert default_embedder() is None
    monkeypatch.delenv("ERRAND_EMBEDDER")
    assert isinstance(default_embedder(), E5Embedder)
    with pytest.raises(ConfigError):
        default_embedder("word2vec")


@pytest.mark.parametrize("cpus", [0.5, 1.0, None])
def test_threads_stay_within_the_cgroup_cpu_quota(cpus: float | None) -> None:
    """A process in a group limited to one CPU embeds on one thread, whatever its affinity says."""
    name = "test-" + uuid.uuid4().hex[:16]
    group = Cgroup.create(name, Limits(cpus=cpus))
    try:
        child = subprocess.run([sys.executable, "-c", textwrap.dedent("""
            import os, sys
            for path in sys.argv[1:]:
                with open(path, "w") as handle:
                    handle.write(str(os.getpid()))
            from errand.memory import embedders
            print(embedders.cpu_quota(), embedders.MAX_THREADS)
        """), *group.procs_files()], capture_output=True, text=True, check=True)
    finally:
        group.remove()
    printed, most = child.stdout.split()
    quota = None if printed == "None" else float(printed)  # the group's, or a smaller one above it
    if cpus is not None:
        assert quota is not None and quota <= cpus and int(most) == 1
    assert int(most) == max(1, min(4, len(os.sched_getaffinity(0)), math.ceil(quota or 4)))


def test_a_long_query_is_embedded_from_its_first_tokens(embedder: E5Embedder) -> None:
    long = ("Add a column for the customer's time zone to the accounts table, backfill it from the billing "
            "address, show it on the profile page next to the language setting, and convert the timestamps "
            "on the invoices page to it")
    model = embedder._load()
    assert model.token_count(long, True) > embedder.max_query_tokens
    kept = embedders._first_tokens(model, long, embedder.max_query_tokens)
    assert long.startswith(kept) and model.token_count(kept, True) <= embedder.max_query_tokens
    one_more = " ".join(long.split()[:len(kept.split()) + 1])
    assert model.token_count(one_more, True) > embedder.max_query_tokens  # the longest prefix that fits
    assert np.allclose(embedder.embed([long], query=True), embedder.embed([kept], query=True), atol=1e-6)
    assert not np.allclose(embedder.embed([long]), embedder.embed([kept]), atol=1e-3)  # passages are whole
    short = "how do I run the tests"
    assert embedders._first_tokens(model, short, embedder.max_query_tokens) == short
