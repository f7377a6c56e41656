from __future__ import annotations

import os

import numpy as np
import pytest

from errand.errors import ConfigError
from errand.memory import E5Embedder, default_embedder


def test_vectors_are_unit_length_and_meaningful(embedder: E5Embedder) -> None:
    vectors = embedder.embed(["Run the unit tests with pytest.", "The cat sat on the mat.", ""])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:2], axis=1), 1.0, atol=1e-3)
    query = embedder.embed(["how do I run the tests"], query=True)[0]
    assert float(vectors[0] @ query) > float(vectors[1] @ query)
    assert embedder.embed([]).shape == (0, 384)


def test_loading_leaves_the_environment_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    E5Embedder().embed(["load it"])
    assert "OMP_WAIT_POLICY" not in os.environ


def test_default_embedder_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERRAND_EMBEDDER", "none")
    assert default_embedder() is None
    monkeypatch.delenv("ERRAND_EMBEDDER")
    assert isinstance(default_embedder(), E5Embedder)
    with pytest.raises(ConfigError):
        default_embedder("word2vec")
