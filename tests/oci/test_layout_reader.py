"""Layout tags as the image spec and the containers tools read them (DIR:TAG arguments whose tag
is a full name), and a layout added to rather than replaced (LayoutWriter merge)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lemonpack.errors import IntegrityError, LemonpackError
from lemonpack.oci.canonical import MEDIA_TYPE_LAYER_TAR
from lemonpack.oci.layout import LayoutWriter
from lemonpack.oci.layout_reader import read_layout, split_layout_arg, verify_layout
from lemonpack.oci.reference import InvalidReferenceError, is_tag, split_ref_name


def _layout(path: Path, tags: dict[str, bytes]) -> dict[str, str]:
    """A layout at ``path`` with one tiny image per tag (layer content given); {tag: digest}."""
    out = {}
    with LayoutWriter(path) as lw:
        for tag, content in tags.items():
            layer = lw.add_blob_bytes(MEDIA_TYPE_LAYER_TAR, content)
            image = lw.add_image_manifest({"architecture": "amd64", "os": "linux"}, [layer], created=0)
            lw.set_tags({tag: image})
            out[tag] = image.digest
    return out


def test_split_layout_arg_reads_full_name_tags_and_colons_in_directories(tmp_path):
    plain = tmp_path / "plain"
    _layout(plain, {"v1": b"a", "docker.io/x/a:1": b"b", "ghcr.io/y/b:2": b"c"})
    colon = tmp_path / "lay:out"
    _layout(colon, {"docker.io/x/a:1": b"d"})
    assert split_layout_arg(f"{plain}:v1") == (str(plain), "v1")
    assert split_layout_arg(f"{plain}:docker.io/x/a:1") == (str(plain), "docker.io/x/a:1")
    assert split_layout_arg(f"{plain}:ghcr.io/y/b:2") == (str(plain), "ghcr.io/y/b:2")
    assert split_layout_arg(str(plain)) == (str(plain), None)
    assert split_layout_arg(f"{colon}:docker.io/x/a:1") == (str(colon), "docker.io/x/a:1")
    assert split_layout_arg(str(colon)) == (str(colon), None)
    # an unknown tag still splits after the layout (the caller lists the layout's tags)
    assert split_layout_arg(f"{plain}:docker.io/x/absent:9") == (str(plain), "docker.io/x/absent:9")
    # no layout there: the last ':' when a plain tag follows (the caller says DIR is no layout)
    assert split_layout_arg(f"{tmp_path}/missing:v1") == (f"{tmp_path}/missing", "v1")


def test_split_ref_name_gives_the_name_a_full_name_tag_carries():
    assert split_ref_name("v1") == (None, "v1")
    assert split_ref_name("docker.io/x/a:1") == ("docker.io/x/a", "1")
    assert split_ref_name("ghcr.io/y/b") == ("ghcr.io/y/b", "latest")
    assert is_tag("hello-engine.linux-cpu") and not is_tag("docker.io/x/a:1") and not is_tag("a:1")
    with pytest.raises(InvalidReferenceError):
        split_ref_name("docker.io/x/a@sha256:" + "0" * 64)
    with pytest.raises(InvalidReferenceError):
        split_ref_name("Not A Name")


def test_merge_adds_tags_keeps_the_rest_and_replaces_a_same_named_tag(tmp_path):
    out = tmp_path / "out"
    old = _layout(out, {"a": b"1", "b": b"2"})
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
    _layout(out, {"a": b"1"})
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
