"""Presence facts as I/O apart from the pure selector (lemonpack/runtime/selection/presence.py): a
variant's installed binary, a command by path or on PATH, a container image asked of the store
the recipe's own command line selects (and of real podman)."""

from __future__ import annotations

import io
import secrets
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from lemonpack.contract.host import HostFacts
from lemonpack.runtime.selection.presence import gather_presence, image_present
from lemonpack.runtime.selection.selector import Presence

from support.recipes import load_doc, recipe_doc
from support.tools import need

CPU_HOST = HostFacts("linux", frozenset({"cpu"}))


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_presence_of_variant_binary_and_commands(tmp_path, monkeypatch):
    var = load_doc(recipe_doc("vari", binary="llama-server", variant_of="llamacpp", version_policy="roll_forward"))
    abs_cmd = load_doc(recipe_doc("absc", command="/opt/absc/server"))  # not on this machine
    path_cmd = load_doc(recipe_doc("pathc", command="my-engine-xyz", args=[]))
    tok_cmd = load_doc(recipe_doc("tokc", command="{exe_dir}/srv", args=[]))
    ext = tmp_path / "external"
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    recs = [var, abs_cmd, path_cmd, tok_cmd]
    facts = gather_presence(recs, CPU_HOST, external_dir=lambda rid: ext / rid)
    assert not facts["vari"].present and facts["vari"].what == f"binary {ext / 'vari' / 'llama-server'}"
    assert not facts["absc"].present and facts["absc"].what == "command /opt/absc/server"
    assert not facts["pathc"].present and facts["pathc"].what == "command my-engine-xyz on PATH"
    assert facts["tokc"].present and "not checked" in facts["tokc"].what
    binary = _exe(ext / "vari" / "llama-server")
    _exe(tmp_path / "bin" / "my-engine-xyz")
    facts = gather_presence(recs, CPU_HOST, external_dir=lambda rid: ext / rid)
    assert facts["vari"].present and facts["pathc"].present
    binary.chmod(0o644)  # not executable: not present
    assert not gather_presence([var], CPU_HOST, external_dir=lambda rid: ext / rid)["vari"].present
    # no block for the host: no fact at all
    assert gather_presence([var], HostFacts("darwin", frozenset({"cpu", "metal"}))) == {}


def _container_recipe(image: str, globals_: tuple[str, ...] = ()):
    return load_doc(recipe_doc("boxed", command="podman",
                               args=[*globals_, "run", "--rm", "--name", "lp-{port}", "-p", "{port}:8080", image]))


def test_presence_of_a_container_image_asks_the_engine():
    img = "quay.io/example/engine@sha256:" + "aa" * 64
    asked = []
    facts = gather_presence([_container_recipe(img, ("--root", "/srv/store"))], CPU_HOST,
                            image_check=lambda cli, image: asked.append((cli.argv, image)) or True)
    # asked of the store the recipe's own command line selects (its global options)
    assert asked == [(("podman", "--root", "/srv/store"), img)] and facts["boxed"] == Presence(True, f"image {img}")


@pytest.mark.slow
def test_image_present_with_real_podman(tmp_path):
    """podman answers for the store the recipe's argv selects: an image imported into a
    private ``--root`` is present there and absent from the default store."""
    need("podman")
    runroot = tempfile.mkdtemp(prefix="lp-sel-")  # podman wants a short runroot path
    store = ("podman", "--root", str(tmp_path / "root"), "--runroot", runroot, "--storage-driver", "vfs")
    tar = tmp_path / "one.tar"
    with tarfile.open(tar, "w") as tf:
        info = tarfile.TarInfo("hello")
        info.size = 2
        tf.addfile(info, io.BytesIO(b"hi"))
    name = f"localhost/lemonpack-select-{secrets.token_hex(4)}:t"
    subprocess.run([*store, "import", str(tar), name], check=True, capture_output=True, timeout=120)
    try:
        assert image_present(store, name) is True
        assert image_present("podman", name) is False  # not in the default store
        assert image_present(store, "localhost/lemonpack-select-absent@sha256:" + "0" * 64) is False
        facts = gather_presence([_container_recipe(name, store[1:])], CPU_HOST)
        assert facts["boxed"].present is True
    finally:
        subprocess.run([*store, "rmi", "-f", name], capture_output=True, timeout=120)
        subprocess.run([*store, "system", "reset", "-f"], capture_output=True, timeout=120)
        shutil.rmtree(runroot, ignore_errors=True)
