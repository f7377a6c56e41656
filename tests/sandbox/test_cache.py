"""errand.sandbox.cache: images kept under a caller's id, host trees kept as layers (task setup's cache)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from errand import ConfigError, Image, Sandbox
from errand.sandbox._images.layers import LayerStore
from errand.sandbox.cache import find_image, find_layer, keep_image, keep_layer


def test_a_kept_image_is_found_again_with_its_labels_and_runs(tmp_path: Path) -> None:
    built = Image.base().run(f"echo kept-{tmp_path.name} > /kept").build()
    key = f"env-{tmp_path.name}"
    assert find_image(key) is None
    kept = keep_image(Image.from_config(built), key, {"errand.setup.tree": "tree-x"})
    found = find_image(key)
    assert found is not None and found.config is not None and kept.config is not None
    assert found.id == key and found.config.layers == built.layers
    assert found.config.labels == {**built.labels, "errand.setup.tree": "tree-x"}
    with Sandbox.create(image=found) as sandbox:
        assert sandbox.files.read("/kept") == f"kept-{tmp_path.name}\n".encode()


def test_an_image_of_steps_cannot_be_kept_and_bad_ids_are_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        keep_image(Image.base().run("true"), "env-steps", {})
    assert caught.value.code == "invalid_image"
    for bad in ("../escape", "", "a/b", ".hidden"):
        with pytest.raises(ConfigError):
            find_image(bad)
        with pytest.raises(ConfigError):
            find_layer(bad)


def test_a_kept_image_whose_layer_is_gone_is_not_found(tmp_path: Path) -> None:
    partial = LayerStore().partial()
    (partial / "file").write_text("x")
    layer = LayerStore().commit(partial, f"layer-gone-{tmp_path.name}")
    base = Image.base().build()
    resolved = Image.from_config(base.__class__(f"gone-{tmp_path.name}", (*base.layers, layer.name)))
    keep_image(resolved, f"env-gone-{tmp_path.name}", {})
    assert find_image(f"env-gone-{tmp_path.name}") is not None
    (layer / "file").unlink()
    layer.rmdir()
    assert find_image(f"env-gone-{tmp_path.name}") is None


def test_a_tree_kept_as_a_layer_is_found_and_the_first_of_a_name_stays(tmp_path: Path) -> None:
    name = f"tree-{tmp_path.name}"
    assert find_layer(name) is None

    def fill(text: str) -> Callable[[Path], int]:
        def write(directory: Path) -> int:
            (directory / "version.py").write_text(text)
            return len(text)
        return write

    path, written = keep_layer(name, fill("first\n"))
    assert written == len("first\n") and find_layer(name) == path
    assert (path / "version.py").read_text() == "first\n"
    again, _ = keep_layer(name, fill("second\n"))
    assert again == path and (path / "version.py").read_text() == "first\n"


def test_a_fill_that_fails_leaves_no_layer_and_no_partial(tmp_path: Path) -> None:
    store = LayerStore()
    before = set(store.layers.iterdir()) if store.layers.is_dir() else set()

    def broken(directory: Path) -> None:
        (directory / "half").write_text("written before the failure")
        raise OSError("disk went away")

    with pytest.raises(OSError):
        keep_layer(f"tree-broken-{tmp_path.name}", broken)
    assert set(store.layers.iterdir()) == before
