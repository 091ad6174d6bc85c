"""``lemonpack load``'s layout reader (``image_blobs``, ``write_oci_archive``): every blob of
the image is checked through the verified layout reader before anything reaches an engine; a
tampered one is refused with a LayoutError naming it. (Loading into podman: tests/signing.)"""

from __future__ import annotations

import tarfile

import pytest

from lemonpack.errors import LayoutError
from lemonpack.builder.load import image_blobs, write_oci_archive
from support.oci_layout import TAMPERINGS, small_image, tamper


def test_an_intact_image_is_archived_with_every_blob(tmp_path):
    descs = small_image(tmp_path / "l")
    root, blobs = image_blobs(tmp_path / "l", "img")
    assert root["digest"] == descs["manifest"].digest
    assert [b["digest"] for b in blobs] == [descs[k].digest for k in ("manifest", "config", "artifact", "recipe")]
    assert write_oci_archive(tmp_path / "l", "img", tmp_path / "a.tar", "x:1") == (
        descs["manifest"].digest, descs["config"].digest)
    with tarfile.open(tmp_path / "a.tar") as tf:
        names = set(tf.getnames())
    assert {f"blobs/sha256/{descs[k].hex}" for k in descs} <= names


@pytest.mark.parametrize("how", TAMPERINGS)
@pytest.mark.parametrize("which", ["manifest", "config", "artifact"])
def test_a_tampered_blob_is_refused_naming_it(tmp_path, how, which):
    descs = small_image(tmp_path / "l")
    tamper(tmp_path / "l", descs[which], how)
    with pytest.raises(LayoutError) as info:
        write_oci_archive(tmp_path / "l", "img", tmp_path / "a.tar", "x:1")
    assert descs[which].digest in str(info.value)
