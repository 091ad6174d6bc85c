import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from lemonpack.canonical import canonical_json
from lemonpack.errors import IntegrityError, LemonpackError
from lemonpack.oci import (
    ANNOTATION_REF_NAME, EMPTY_DIGEST, MEDIA_TYPE_EMPTY, MEDIA_TYPE_IMAGE_INDEX,
    MEDIA_TYPE_IMAGE_MANIFEST, MEDIA_TYPE_LAYER_TAR_GZIP, Descriptor, LayoutWriter,
    read_layout, verify_layout, write_dir_layer, write_files_layer,
)
from lemonpack.oci.mediatypes import MEDIA_TYPE_LAYER_TAR

from support.oci_base import tagged_layout

ARTIFACT_TYPE = "application/vnd.lemonpack.recipe.v1+json"


def _build(out: Path, src: Path) -> dict[str, Descriptor]:
    with LayoutWriter(out) as lw:
        layer = lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP,
                                 lambda f: write_dir_layer(src, "opt/lemonpack/demo", f, mtime=0,
                                                           compresslevel=1))
        extra = lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP,
                                 lambda f: write_files_layer([("etc/demo.json", b"{}", 0o644)], f,
                                                             mtime=0, compresslevel=1))
        image = lw.add_image_manifest(
            {"architecture": "amd64", "os": "linux",
             "config": {"Entrypoint": ["/opt/lemonpack/demo/run"], "Env": ["A=1"]}},
            [layer, extra], {"org.opencontainers.image.title": "demo"}, created=0)
        recipe = lw.add_blob_bytes("application/json", canonical_json({"recipe": "demo"}),
                                   {"org.opencontainers.image.title": "demo.json"})
        artifact = lw.add_artifact_manifest(ARTIFACT_TYPE, [recipe], subject=image)
        index = lw.add_index([image])
        tags = {"demo": image, "demo-recipe": artifact, "demo-index": index}
        lw.set_tags(tags)
    return tags


@pytest.fixture
def src(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    (d / "run").write_text("#!/bin/sh\necho hi\n")
    (d / "run").chmod(0o755)
    return d


@pytest.fixture
def layout(tmp_path, src):
    out = tmp_path / "layout"
    _build(out, src)
    return out


def test_layout_files(layout):
    assert (layout / "oci-layout").read_bytes() == b'{"imageLayoutVersion":"1.0.0"}'
    index = json.loads((layout / "index.json").read_bytes())
    assert index["schemaVersion"] == 2 and index["mediaType"] == MEDIA_TYPE_IMAGE_INDEX
    names = [m["annotations"][ANNOTATION_REF_NAME] for m in index["manifests"]]
    assert names == sorted(names)
    assert canonical_json(index) == (layout / "index.json").read_bytes()
    assert not [p for p in layout.parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    assert not [p for p in (layout / "blobs" / "sha256").iterdir() if p.name.startswith(".")]


def test_read_and_verify(layout):
    tags = read_layout(layout)
    assert set(tags) == {"demo", "demo-recipe", "demo-index"}
    assert tags["demo-recipe"].artifact_type == ARTIFACT_TYPE
    assert tags["demo"].platform == {"architecture": "amd64", "os": "linux"}
    assert verify_layout(layout) == 8  # 2 layers, config, image, recipe, empty, artifact, index


def test_image_config_and_manifest(layout):
    desc = read_layout(layout)["demo"]
    blobs = layout / "blobs" / "sha256"
    manifest = json.loads((blobs / desc.hex).read_bytes())
    assert manifest["mediaType"] == MEDIA_TYPE_IMAGE_MANIFEST
    config = json.loads((blobs / manifest["config"]["digest"].split(":")[1]).read_bytes())
    assert config["created"] == "1970-01-01T00:00:00Z"
    assert config["rootfs"]["type"] == "layers" and len(config["rootfs"]["diff_ids"]) == 2
    assert "history" not in config


def test_artifact_manifest(layout):
    desc = read_layout(layout)["demo-recipe"]
    manifest = json.loads((layout / "blobs" / "sha256" / desc.hex).read_bytes())
    assert manifest["artifactType"] == ARTIFACT_TYPE
    assert manifest["config"] == {"mediaType": MEDIA_TYPE_EMPTY, "digest": EMPTY_DIGEST, "size": 2}
    assert (layout / "blobs" / "sha256" / EMPTY_DIGEST.split(":")[1]).read_bytes() == b"{}"
    assert manifest["subject"]["digest"] == read_layout(layout)["demo"].digest


def test_reproducible_layout(tmp_path, src):
    a = _build(tmp_path / "one", src)
    b = _build(tmp_path / "two" / "nested", src)
    assert a == b
    assert (tmp_path / "one" / "index.json").read_bytes() == (tmp_path / "two" / "nested" / "index.json").read_bytes()


def test_replaces_existing_layout_atomically(tmp_path, src, layout):
    old_index = (layout / "index.json").read_bytes()
    with LayoutWriter(layout) as lw:
        d = lw.add_artifact_manifest(ARTIFACT_TYPE, [])
        lw.set_tags({"only": d})
    assert set(read_layout(layout)) == {"only"}
    assert (layout / "index.json").read_bytes() != old_index
    assert sorted(p.name for p in tmp_path.iterdir()) == ["layout", "src"]


def test_failure_leaves_target_untouched(tmp_path, layout):
    before = (layout / "index.json").read_bytes()
    with pytest.raises(RuntimeError):
        with LayoutWriter(layout) as lw:
            lw.add_blob_bytes("application/json", b"{}")
            raise RuntimeError("boom")
    assert (layout / "index.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["layout", "src"]


def test_failure_in_layer_callback_cleans_up(tmp_path):
    out = tmp_path / "new"
    (tmp_path / "bad").mkdir()
    os.mkfifo(tmp_path / "bad" / "fifo")
    with pytest.raises(LemonpackError):
        with LayoutWriter(out) as lw:
            lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP,
                             lambda f: write_dir_layer(tmp_path / "bad", "x", f, mtime=0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad"]


def test_refuses_non_layout_directory(tmp_path):
    target = tmp_path / "precious"
    target.mkdir()
    (target / "file").write_text("keep me")
    with pytest.raises(LemonpackError, match="not an OCI image layout"):
        with LayoutWriter(target):
            pass
    assert (target / "file").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious"]


def test_accepts_empty_directory(tmp_path):
    target = tmp_path / "empty"
    target.mkdir()
    with LayoutWriter(target) as lw:
        lw.set_tags({"a": lw.add_artifact_manifest(ARTIFACT_TYPE, [])})
    assert set(read_layout(target)) == {"a"}


def test_tags_refuse_ambiguity_and_bad_names(tmp_path):
    with LayoutWriter(tmp_path / "l") as lw:
        a = lw.add_artifact_manifest(ARTIFACT_TYPE, [])
        b = lw.add_artifact_manifest("application/vnd.other+json", [])
        lw.set_tags({"t": a})
        lw.set_tags({"t": a})
        with pytest.raises(LemonpackError, match="already points"):
            lw.set_tags({"t": b})
        with pytest.raises(ValueError):
            lw.set_tags({"bad tag": a})
        with pytest.raises(LemonpackError, match="not a blob"):
            lw.set_tags({"x": Descriptor(MEDIA_TYPE_IMAGE_MANIFEST, "sha256:" + "0" * 64, 1)})


def test_copy_blob_is_a_checked_copy_never_a_hard_link(tmp_path, src):
    cache = tmp_path / "cache.tgz"
    with open(cache, "wb") as f:
        info = write_dir_layer(src, "opt/x", f, mtime=0, compresslevel=1)
    cache.chmod(0o444)
    desc = Descriptor(MEDIA_TYPE_LAYER_TAR_GZIP, info.digest, info.size)
    with LayoutWriter(tmp_path / "l") as lw:
        lw.copy_blob(cache, desc, diff_id=info.diff_id)
        image = lw.add_image_manifest({"architecture": "amd64", "os": "linux"}, [desc])
        lw.set_tags({"x": image})
    blob = tmp_path / "l" / "blobs" / "sha256" / desc.hex
    assert os.stat(blob).st_ino != os.stat(cache).st_ino  # a write to the layout cannot reach the cache
    assert os.stat(cache).st_nlink == 1
    verify_layout(tmp_path / "l")
    blob.chmod(0o644)
    blob.write_bytes(b"changed in the layout")
    assert hashlib.sha256(cache.read_bytes()).hexdigest() == desc.hex
    # a source that is not what the descriptor says never lands in the layout
    bad = Descriptor(MEDIA_TYPE_LAYER_TAR_GZIP, "sha256:" + "1" * 64, info.size)
    with LayoutWriter(tmp_path / "m") as lw:
        with pytest.raises(IntegrityError):
            lw.copy_blob(cache, bad)
        assert sorted(p.name for p in (lw.staging_dir / "blobs" / "sha256").iterdir()) == []
        with pytest.raises(LemonpackError, match="size"):
            lw.copy_blob(cache, Descriptor(MEDIA_TYPE_LAYER_TAR_GZIP, info.digest, info.size + 1))
        assert list((lw.staging_dir / "blobs" / "sha256").iterdir()) == []


def test_diff_id_computed_for_foreign_layer(tmp_path, src):
    cache = tmp_path / "cache.tgz"
    with open(cache, "wb") as f:
        info = write_dir_layer(src, "opt/x", f, mtime=0, compresslevel=1)
    with LayoutWriter(tmp_path / "l") as lw:
        layer = lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP, cache)
        image = lw.add_image_manifest({"architecture": "amd64", "os": "linux"}, [layer])
        lw.set_tags({"x": image})
    m = json.loads((tmp_path / "l" / "blobs" / "sha256" / image.hex).read_bytes())
    cfg = json.loads((tmp_path / "l" / "blobs" / "sha256" / m["config"]["digest"][7:]).read_bytes())
    assert cfg["rootfs"]["diff_ids"] == [info.diff_id]


def test_verify_detects_corruption(layout):
    desc = read_layout(layout)["demo"]
    blob = layout / "blobs" / "sha256" / desc.hex
    blob.chmod(0o644)
    blob.write_bytes(blob.read_bytes() + b" ")
    with pytest.raises(IntegrityError):
        verify_layout(layout)


def test_config_validation(tmp_path):
    with LayoutWriter(tmp_path / "l") as lw:
        with pytest.raises(LemonpackError, match="architecture"):
            lw.add_image_manifest({"os": "linux"}, [])
        with pytest.raises(LemonpackError, match="rootfs"):
            lw.add_image_manifest({"os": "linux", "architecture": "amd64", "rootfs": {}}, [])


# --- real tools ----------------------------------------------------------------------

def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_skopeo_inspects_image_and_index(require_tool, layout):
    require_tool("skopeo")
    image = _run("skopeo", "inspect", f"oci:{layout}:demo")
    assert image.returncode == 0, image.stderr
    doc = json.loads(image.stdout)
    assert doc["Digest"] == read_layout(layout)["demo"].digest
    assert doc["Architecture"] == "amd64" and doc["Os"] == "linux"
    assert len(doc["Layers"]) == 2
    config = json.loads(_run("skopeo", "inspect", "--config", f"oci:{layout}:demo").stdout)
    assert config["config"]["Entrypoint"] == ["/opt/lemonpack/demo/run"]
    index = _run("skopeo", "inspect", "--raw", f"oci:{layout}:demo-index")
    assert index.returncode == 0 and json.loads(index.stdout)["mediaType"] == MEDIA_TYPE_IMAGE_INDEX


def test_skopeo_and_artifacts(require_tool, layout, tmp_path):
    """skopeo reads and copies an artifact manifest (empty config) byte for byte; its
    `inspect` (1.9) refuses artifacts, and a skopeo that accepts them must report our digest."""
    require_tool("skopeo")
    want = read_layout(layout)["demo-recipe"]
    raw = _run("skopeo", "inspect", "--raw", f"oci:{layout}:demo-recipe")
    assert raw.returncode == 0, raw.stderr
    assert json.loads(raw.stdout)["artifactType"] == ARTIFACT_TYPE
    assert "sha256:" + hashlib.sha256(raw.stdout.encode()).hexdigest() == want.digest
    dest = tmp_path / "copy"
    done = _run("skopeo", "copy", f"oci:{layout}:demo-recipe", f"oci:{dest}:r")
    assert done.returncode == 0, done.stderr
    verify_layout(dest)
    assert read_layout(dest)["r"].digest == want.digest
    cooked = _run("skopeo", "inspect", f"oci:{layout}:demo-recipe")
    if cooked.returncode == 0:
        assert json.loads(cooked.stdout)["Digest"] == want.digest
    else:
        assert "artifact" in cooked.stderr and "vnd.oci.empty" in cooked.stderr, cooked.stderr


def test_skopeo_copies_layout_to_layout(require_tool, layout, tmp_path):
    require_tool("skopeo")
    dest = tmp_path / "copy"
    done = _run("skopeo", "copy", f"oci:{layout}:demo", f"oci:{dest}:demo")
    assert done.returncode == 0, done.stderr
    verify_layout(dest)
    assert read_layout(dest)["demo"].digest == read_layout(layout)["demo"].digest


def test_umoci_accepts_layout(require_tool, layout, tmp_path):
    require_tool("umoci")
    listing = _run("umoci", "ls", "--layout", str(layout))
    assert listing.returncode == 0, listing.stderr
    assert set(listing.stdout.split()) == {"demo", "demo-index", "demo-recipe"}
    stat = _run("umoci", "stat", "--image", f"{layout}:demo")
    assert stat.returncode == 0, stat.stderr
    bundle = tmp_path / "bundle"
    unpack = _run("umoci", "unpack", "--image", f"{layout}:demo", str(bundle))
    assert unpack.returncode == 0, unpack.stderr
    run = bundle / "rootfs" / "opt" / "lemonpack" / "demo" / "run"
    assert run.read_text() == "#!/bin/sh\necho hi\n" and os.access(run, os.X_OK)
    assert (bundle / "rootfs" / "etc" / "demo.json").read_bytes() == b"{}"


def test_merge_adds_tags_keeps_the_rest_and_replaces_a_same_named_tag(tmp_path):
    out = tmp_path / "out"
    old = tagged_layout(out, {"a": b"1", "b": b"2"})
    (out / "nix").mkdir()
    (out / "nix" / "NOTES.txt").write_text("mine")
    index = json.loads((out / "index.json").read_text())
    index["manifests"].append({**index["manifests"][0], "annotations": {"user": "untagged entry kept"}})
    (out / "index.json").write_text(json.dumps(index))

    with LayoutWriter(out, merge=True) as lw:
        layer = lw.add_blob_bytes(MEDIA_TYPE_LAYER_TAR, b"3")
        image = lw.add_image_manifest({"architecture": "amd64", "os": "linux"}, [layer], created=0)
        lw.set_tags({"b": image, "c": image})
    assert lw.merged and lw.kept == 1 and lw.replaced == {"b": old["b"]}
    assert {t: d.digest for t, d in read_layout(out).items()} == {"a": old["a"], "b": image.digest, "c": image.digest}
    assert (out / "nix" / "NOTES.txt").read_text() == "mine"
    entries = json.loads((out / "index.json").read_text())["manifests"]
    assert any(e.get("annotations") == {"user": "untagged entry kept"} for e in entries)
    verify_layout(out)
    assert not [p for p in tmp_path.iterdir() if p.name != "out"]  # no staging directory left


def test_a_failed_merge_changes_nothing_and_a_non_layout_is_refused(tmp_path):
    out = tmp_path / "out"
    tagged_layout(out, {"a": b"1"})
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(RuntimeError):
        with LayoutWriter(out, merge=True) as lw:
            lw.add_blob_bytes(MEDIA_TYPE_LAYER_TAR, b"new")
            raise RuntimeError("the download failed")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("x")
    with pytest.raises(LemonpackError, match="not an OCI image layout"):
        with LayoutWriter(notes, merge=True):
            pass
    assert [p.name for p in notes.iterdir()] == ["todo.txt"]
    (out / "oci-layout").write_text('{"imageLayoutVersion":"9.9.9"}')
    with pytest.raises(LemonpackError, match="not an OCI image layout 1.0.0"):
        with LayoutWriter(out, merge=True):
            raise AssertionError("entered a layout it cannot add to")


def test_receive_blob_keeps_what_a_verifying_writer_wrote_and_nothing_on_error(tmp_path):
    data = b"blob bytes"
    from lemonpack.oci.descriptor import Descriptor

    desc = Descriptor(MEDIA_TYPE_LAYER_TAR, "sha256:" + hashlib.sha256(data).hexdigest(), len(data))
    with LayoutWriter(tmp_path / "l") as lw:
        lw.receive_blob(desc, lambda f: f.write(data))

        def refuse(f):
            f.write(b"other")
            raise IntegrityError("blob", desc.digest, "sha256:" + "0" * 64)

        other = Descriptor(MEDIA_TYPE_LAYER_TAR, "sha256:" + "1" * 64, 5)
        with pytest.raises(IntegrityError):
            lw.receive_blob(other, refuse)
        blobs = sorted(p.name for p in (lw.staging_dir / "blobs" / "sha256").iterdir())
        assert blobs == [desc.hex]
        layer = lw.add_image_manifest({"architecture": "amd64", "os": "linux"}, [desc], created=0)
        lw.set_tags({"t": layer})
    verify_layout(tmp_path / "l")
