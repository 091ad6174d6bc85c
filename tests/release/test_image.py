"""One release image written from placeholder inputs (extension directories, generated
files, lock, a recipe payload): byte-reproducible whatever the directory, the umask, the
inputs' mtimes and the clock; the epoch sets every time; the layout verifies."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from pathlib import Path

from lemonpack.oci import LayoutWriter, read_layout, verify_layout
from lemonpack.release import ExtensionTree, ImageInputs, RecipePayload, write_image
from lemonpack.release.definition import ImageDefinition

GENERATED = {"extensions.json": b'{"api_version":"0.1.1","extensions":[],"features":["linux"],"schema":1}',
             "gufo_ext_registry.cpp": b"// registry\n", "gufo_ext_constants.hpp": b"// constants\n"}
LOCK = b'{"schema": 1, "extensions": ["alpha", "beta"]}\n'


def _definition(archs=("amd64", "arm64")) -> ImageDefinition:
    return ImageDefinition(file="containers/img.json", name="img", description="test image",
                           architectures=tuple(archs), features=frozenset({"linux", "hip"}), base="scratch",
                           extensions="lock", recipes=())


def _inputs(root: Path, mtime: int, umask: int) -> ImageInputs:
    old = os.umask(umask)
    try:
        exts = []
        for name in ("alpha", "beta"):
            d = root / "ext" / name
            (d / "src").mkdir(parents=True)
            (d / "extension.json").write_text(json.dumps({"name": name}))
            (d / "src" / "entry.cpp").write_text(f"// {name}\n")
            exts.append(ExtensionTree(name, "1.0.0", d))
        art = root / "artifact"
        art.mkdir()
        (art / "engine").write_text("#!/bin/sh\n")
        os.chmod(art / "engine", 0o777 & ~umask | 0o100)
    finally:
        os.umask(old)
    for p in root.rglob("*"):
        os.utime(p, (mtime, mtime), follow_symlinks=False)
    recipe = RecipePayload("hello", b'{"recipe":"hello"}', art, "https://example.invalid/a.tgz", "sha256:" + "ab" * 32)
    return ImageInputs(_definition(), tuple(exts), GENERATED, LOCK, "0.1.1", (recipe,))


def _write(out: Path, inputs: ImageInputs, epoch: int):
    with LayoutWriter(out) as lw:
        result = write_image(lw, inputs, epoch=epoch)
    return result


def _blobs(layout: Path) -> dict[str, bytes]:
    files = {p.relative_to(layout).as_posix(): p.read_bytes() for p in layout.rglob("*") if p.is_file()}
    return files


def test_same_inputs_same_bytes_anywhere(tmp_path):
    a = _inputs(tmp_path / "one" / "deep" / "er", mtime=1_000_000, umask=0o022)
    b = _inputs(tmp_path / "two", mtime=1_700_000_000, umask=0o077)
    ra = _write(tmp_path / "one" / "layout", a, epoch=0)
    rb = _write(tmp_path / "elsewhere" / "x" / "layout", b, epoch=0)
    assert ra.index == rb.index and ra.manifests == rb.manifests
    assert _blobs(tmp_path / "one" / "layout") == _blobs(tmp_path / "elsewhere" / "x" / "layout")
    assert verify_layout(tmp_path / "one" / "layout") > 0


def test_tags_index_and_platforms(tmp_path):
    r = _write(tmp_path / "layout", _inputs(tmp_path / "in", 5, 0o022), epoch=0)
    tags = read_layout(tmp_path / "layout")
    assert set(tags) == {"img", "img.amd64", "img.arm64"}
    assert tags["img"].digest == r.index.digest
    blob = tmp_path / "layout" / "blobs" / "sha256"
    index = json.loads((blob / r.index.hex).read_bytes())
    assert [m["platform"] for m in index["manifests"]] == [{"architecture": "amd64", "os": "linux"},
                                                          {"architecture": "arm64", "os": "linux"}]
    assert index["annotations"]["org.opencontainers.image.title"] == "img"


def _tar_members(layout: Path, manifest_hex: str) -> tuple[dict[str, tarfile.TarInfo], dict[str, bytes]]:
    """Every member of the manifest's layers, and the bytes of the regular files."""
    blob = layout / "blobs" / "sha256"
    manifest = json.loads((blob / manifest_hex).read_bytes())
    members, contents = {}, {}
    for layer in manifest["layers"]:
        data = gzip.decompress((blob / layer["digest"].split(":")[1]).read_bytes())
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for m in tar.getmembers():
                members[m.name] = m
                if m.isfile():
                    contents[m.name] = tar.extractfile(m).read()
    return members, contents


def test_epoch_sets_every_time_and_contents(tmp_path):
    inputs = _inputs(tmp_path / "in", 12345, 0o022)
    epoch = 1_700_000_000
    r0 = _write(tmp_path / "zero", inputs, epoch=0)
    r1 = _write(tmp_path / "later", inputs, epoch=epoch)
    assert r0.index.digest != r1.index.digest
    layout = tmp_path / "later"
    blob = layout / "blobs" / "sha256"
    manifest = json.loads((blob / r1.manifests["amd64"].hex).read_bytes())
    config = json.loads((blob / manifest["config"]["digest"].split(":")[1]).read_bytes())
    assert config["created"] == "2023-11-14T22:13:20Z"
    assert manifest["annotations"]["org.opencontainers.image.created"] == "2023-11-14T22:13:20Z"
    assert config["config"]["Labels"]["dev.lemonpack.release.features"] == "hip,linux"
    members, content = _tar_members(layout, r1.manifests["amd64"].hex)
    assert {m.mtime for m in members.values()} == {epoch}
    assert {(m.uid, m.gid, m.uname, m.gname) for m in members.values()} == {(0, 0, "", "")}
    for name, data in GENERATED.items():
        assert content[f"opt/gufo/generated/{name}"] == data
    assert content["opt/gufo/extensions.lock"] == LOCK
    assert content["opt/gufo/extensions/alpha/src/entry.cpp"] == b"// alpha\n"
    assert members["opt/lemonpack/hello/engine"].mode == 0o755
    assert content["etc/lemonpack/recipes/hello.json"] == b'{"recipe":"hello"}'
    # the layers are shared by the two architectures; only the config differs
    m_arm = json.loads((blob / r1.manifests["arm64"].hex).read_bytes())
    assert m_arm["layers"] == manifest["layers"] and m_arm["config"] != manifest["config"]
