"""lemonpack.oci.layerscan.scan_layer and shadow_problem: one read of a base layer in each
compression gives the tar's diff_id, the blob's digest and the entries that could hide the
engine's directory."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile

import pytest
import zstandard

from lemonpack.oci.layerscan import BadLayer, LayerFacts, scan_layer, shadow_problem

MEDIA = {"gzip": "application/vnd.oci.image.layer.v1.tar+gzip", "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
         "tar": "application/vnd.oci.image.layer.v1.tar"}


def _tar() -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        for name, data in [("./usr/lib/big.so", os.urandom(3 << 20)), ("etc/.wh.old", b""), ("opt/x", b"x")]:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return raw.getvalue()


@pytest.mark.parametrize("kind", ["gzip", "zstd", "tar"])
def test_scan_gives_diff_id_digest_and_entries(tmp_path, kind):
    tar = _tar()
    blob = {"gzip": lambda b: gzip.compress(b, 1), "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
            "tar": lambda b: b}[kind](tar)
    path = tmp_path / "layer"
    path.write_bytes(blob)
    facts = scan_layer(path, MEDIA[kind])
    assert facts.diff_id == "sha256:" + hashlib.sha256(tar).hexdigest()
    assert facts.digest == "sha256:" + hashlib.sha256(blob).hexdigest()
    assert facts.entries == (("etc/.wh.old", "whiteout"), ("opt/x", "file"))
    assert LayerFacts.from_json(facts.to_json()).entries == facts.entries


def test_unreadable_layer_still_reports_its_digest(tmp_path):
    path = tmp_path / "layer"
    path.write_bytes(b"\x1f\x8b not gzip at all" * 100)
    with pytest.raises(BadLayer) as info:
        scan_layer(path, MEDIA["gzip"])
    assert info.value.digest == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("entries,problem", [
    ([("etc/.wh.old", "whiteout"), ("opt", "dir"), ("opt/other/x", "file")], None),
    ([("opt/lemonpack/.wh.r", "whiteout")], "hides /opt/lemonpack/r"),
    ([("opt/lemonpack/r/.wh..wh..opq", "whiteout")], "hides /opt/lemonpack/r"),
    ([(".wh..wh..opq", "whiteout")], "hides"),
    ([("opt/lemonpack", "symlink")], "/opt/lemonpack is a symlink"),
    ([("opt/lemonpack/r/bin", "file")], "already holds /opt/lemonpack/r/bin"),
])
def test_shadow_problem(entries, problem):
    got = shadow_problem(LayerFacts("sha256:" + "0" * 64, tuple(entries)), "opt/lemonpack/r")
    assert (got is None) if problem is None else (problem in got)
