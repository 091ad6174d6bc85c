"""Reading layouts (lemonpack/oci/layout_reader.py): DIR:TAG arguments as the image spec and the
containers tools read them (a tag may be a full name, a directory may hold a colon); the verified
readers of a layout blob (:func:`read_blob` for small JSON blobs, :func:`verify_blob` for a blob of
any size handed on by path): a blob that is not what its descriptor says is refused with a
LayoutError naming it, whatever the reader."""

from __future__ import annotations

import pytest

from lemonpack.errors import IntegrityError, LayoutBlobError, LayoutError
from lemonpack.oci.layout_reader import blob_path, read_blob, split_layout_arg, verify_blob

from support.oci_base import tagged_layout
from support.oci_layout import TAMPERINGS, small_image, tamper


def test_split_layout_arg_reads_full_name_tags_and_colons_in_directories(tmp_path):
    plain = tmp_path / "plain"
    tagged_layout(plain, {"v1": b"a", "docker.io/x/a:1": b"b", "ghcr.io/y/b:2": b"c"})
    colon = tmp_path / "lay:out"
    tagged_layout(colon, {"docker.io/x/a:1": b"d"})
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


@pytest.fixture
def image(tmp_path):
    return tmp_path / "layout", small_image(tmp_path / "layout")


def test_intact_blobs_are_read_and_verified(image):
    layout, descs = image
    data = read_blob(layout, descs["manifest"], "m")
    assert len(data) == descs["manifest"].size
    assert verify_blob(layout, descs["artifact"], "layer") == blob_path(layout, descs["artifact"])


@pytest.mark.parametrize("how", TAMPERINGS)
@pytest.mark.parametrize("reader", [read_blob, verify_blob])
def test_a_tampered_blob_is_refused_naming_it(image, how, reader):
    layout, descs = image
    desc = descs["manifest"] if reader is read_blob else descs["artifact"]
    tamper(layout, desc, how)
    with pytest.raises(LayoutError) as info:
        reader(layout, desc, "the blob")
    assert desc.digest in str(info.value) and "the blob" in str(info.value)
    if how != "symlink":  # other bytes or another size: also a digest mismatch (exit 3)
        assert isinstance(info.value, LayoutBlobError) and isinstance(info.value, IntegrityError)
        assert info.value.exit_code == 3
    else:
        assert not isinstance(info.value, IntegrityError)  # the bytes were never read


def test_a_missing_blob_is_a_layout_error(image):
    layout, descs = image
    blob_path(layout, descs["config"]).unlink()
    for reader in (read_blob, verify_blob):
        with pytest.raises(LayoutError, match="is missing"):
            reader(layout, descs["config"], "config")


def test_verify_blob_refuses_a_wrong_size_before_hashing(image):
    """The size is known from the file: a blob another size than its descriptor is refused as
    such (the message says so), not read to its end first."""
    layout, descs = image
    tamper(layout, descs["artifact"], "size")
    with pytest.raises(LayoutBlobError, match=r"\(size\).*expected %d bytes" % descs["artifact"].size):
        verify_blob(layout, descs["artifact"], "layer")
