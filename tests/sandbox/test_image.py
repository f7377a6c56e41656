"""Image build steps: caching by parent + step, rebuild from the first change, logs, failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from errand import ConfigError, Image, ImageBuildError, Sandbox
from errand.sandbox._images.layers import LayerStore


def _build(image: Image) -> tuple[list[str], object]:
    lines: list[str] = []
    config = image.build(log=lines.append)
    return lines, config


def test_steps_are_cached_and_rebuilt_from_the_first_change(tmp_path: Path) -> None:
    marker = tmp_path.name
    first = Image.base().run(f"echo one-{marker} > /one").run(f"echo two-{marker} > /two")
    lines, _ = _build(first)
    assert [line.split()[0] for line in lines if line.startswith(("STEP", "CACHED"))] == ["STEP", "STEP"]
    lines, _ = _build(Image.base().run(f"echo one-{marker} > /one").run(f"echo two-{marker} > /two"))
    assert [line.split()[0] for line in lines if line.startswith(("STEP", "CACHED"))] == ["CACHED", "CACHED"]
    changed = Image.base().run(f"echo one-{marker} > /one").run(f"echo CHANGED-{marker} > /two")
    lines, _ = _build(changed)
    assert [line.split()[0] for line in lines if line.startswith(("STEP", "CACHED"))] == ["CACHED", "STEP"]
    with Sandbox.create(image=changed) as sandbox:
        assert sandbox.files.read("/one") == f"one-{marker}\n".encode()
        assert sandbox.files.read("/two") == f"CHANGED-{marker}\n".encode()


def test_build_log_streams_command_output(tmp_path: Path) -> None:
    lines, _ = _build(Image.base().run(f"echo hello-from-build-{tmp_path.name}; echo to-stderr >&2"))
    assert f"hello-from-build-{tmp_path.name}" in lines
    assert "to-stderr" in lines


def test_copy_env_and_workdir_steps(tmp_path: Path) -> None:
    source = tmp_path / "app"
    source.mkdir()
    (source / "main.py").write_text("print('copied')\n")
    image = Image.base().copy(source, "/app").env(GREETING="hi").workdir("/app")
    with Sandbox.create(image=image) as sandbox:
        result = sandbox.run("sh", "-c", "echo $GREETING; pwd; python3 main.py")
        assert result.stdout.split() == ["hi", "/app", "copied"]
        # Copied files belong to the sandbox's root, so it can change them.
        assert sandbox.run("sh", "-c", "echo more >> /app/main.py").exit_code == 0
    # A changed source is a changed step.
    (source / "main.py").write_text("print('changed')\n")
    with Sandbox.create(image=image) as sandbox:
        assert sandbox.run("python3", "main.py").stdout == "changed\n"


def test_failed_step_raises_with_its_log_and_commits_nothing(tmp_path: Path) -> None:
    store = LayerStore()
    before = set(store.layers.iterdir()) if store.layers.is_dir() else set()
    image = Image.base().run(f"echo about-to-fail-{tmp_path.name}; exit 7")
    with pytest.raises(ImageBuildError) as caught:
        image.build()
    assert caught.value.exit_code == 7
    assert f"about-to-fail-{tmp_path.name}" in caught.value.log
    assert caught.value.code == "image_build_failed"
    after = {p for p in store.layers.iterdir() if not p.name.startswith(".partial-")}
    assert after - before == set()


def test_snapshot_image_can_take_more_steps() -> None:
    with Sandbox.create() as sandbox:
        sandbox.files.write("/state.txt", "from the sandbox")
        snapshot = sandbox.snapshot()
    child = snapshot.run("cat /state.txt > /copy.txt")
    with Sandbox.create(image=child) as sandbox:
        assert sandbox.files.read_text("/copy.txt") == "from the sandbox"


@pytest.mark.parametrize("make", [
    lambda: Image.base().apt_install("curl"),
    lambda: Image.base().run(""),
    lambda: Image.base().pip_install(),
    lambda: Image.base().pip_install("pytest; rm -rf /"),
    lambda: Image.base().copy("/definitely/not/here", "/x"),
    lambda: Image.base().copy(".", "relative"),
    lambda: Image.base().env({"A=B": "c"}),
    lambda: Image.base().workdir("../up"),
    lambda: Image.debian("../etc"),
    lambda: Image.from_steps([{"frobnicate": "x"}]),
    lambda: Image.from_steps([{"run": "true", "extra": 1}]),
])
def test_bad_steps_are_refused_at_construction(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError):
        make()


def test_steps_from_data() -> None:
    image = Image.from_steps([{"run": "echo a > /a"}, {"env": {"X": "1"}}, {"workdir": "/tmp"}])
    assert [step.kind for step in image.steps] == ["base", "run", "env", "workdir"]


@pytest.mark.network
def test_pip_install_from_the_machines_package_index() -> None:
    image = Image.base().pip_install("iniconfig")
    with Sandbox.create(image=image) as sandbox:
        result = sandbox.run("python3", "-c", "import iniconfig; print(iniconfig.__name__)")
        assert result.stdout == "iniconfig\n", result.stderr


def test_build_steps_run_as_a_capable_root_but_sandboxes_do_not(tmp_path: Path) -> None:
    # Package installs chown files and create users, so build steps keep a root-like set of
    # capabilities inside the sandbox's own user namespace; commands in a sandbox keep none.
    image = Image.base().run(f"chown 1000:1000 /etc/hostname && grep CapEff /proc/self/status > /caps-{tmp_path.name}")
    with Sandbox.create(image=image) as sandbox:
        assert sandbox.run("stat", "-c", "%u", "/etc/hostname").stdout == "1000\n"
        assert int(sandbox.files.read_text(f"/caps-{tmp_path.name}").split()[1], 16) != 0
        runtime = sandbox.run("grep", "CapEff", "/proc/self/status").stdout
        assert int(runtime.split()[1], 16) == 0
        assert sandbox.run("chown", "1000", "/tmp").exit_code != 0


def test_a_build_into_a_store_of_its_own_keeps_every_layer_there(tmp_path: Path) -> None:
    store = LayerStore(tmp_path / "home")
    image = Image.base().run(f"echo own-{tmp_path.name} > /own")
    config = image.build(store=store)
    assert all(store.has(layer) for layer in config.layers)
    assert not LayerStore().has(config.layers[-1])  # nothing of it in errand's home
    lines: list[str] = []
    image.build(log=lines.append, store=store)
    assert [line.split()[0] for line in lines if line.startswith(("STEP", "CACHED"))] == ["CACHED"]
