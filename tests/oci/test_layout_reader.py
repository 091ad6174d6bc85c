"""Reading layouts (lemonpack/oci/layout_reader.py): DIR:TAG arguments as the image spec and the
containers tools read them (a tag may be a full name, a directory may hold a colon)."""

from __future__ import annotations

from lemonpack.oci.layout_reader import split_layout_arg

from support.oci_base import tagged_layout


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


