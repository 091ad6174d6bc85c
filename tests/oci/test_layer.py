import gzip
import hashlib
import io
import os
import socket
import subprocess
import tarfile
from pathlib import Path

import pytest

from lemonpack.errors import UnsafeContentError
from lemonpack.oci.layer import LayerInfo, write_dir_layer, write_files_layer


def _make_tree(root: Path, *, umask: int, mtime: int, owner: int) -> Path:
    """The same logical tree, created with different umask, times and owner."""
    old = os.umask(umask)
    try:
        root.mkdir()
        (root / "bin").mkdir()
        (root / "lib" / "deep").mkdir(parents=True)
        (root / "bin" / "engine").write_bytes(b"#!/bin/sh\necho engine\n")
        os.chmod(root / "bin" / "engine", 0o777 & ~umask)
        (root / "lib" / "deep" / "data.bin").write_bytes(bytes(range(256)) * 5000)
        (root / "lib" / "z-empty").write_bytes(b"")
        (root / "lib" / "é-unicode.txt").write_text("héllo")
        (root / "lib" / ("long" * 40)).write_bytes(b"long name")
        os.symlink("deep/data.bin", root / "lib" / "link")
        os.link(root / "bin" / "engine", root / "bin" / "hardlink")
    finally:
        os.umask(old)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames + [""]:
            p = os.path.join(dirpath, name)
            if os.geteuid() == 0:
                os.lchown(p, owner, owner)
            os.utime(p, (mtime, mtime), follow_symlinks=False)
    return root


def _layer(src: Path, prefix="opt/lemonpack/recipe", mtime=0, level=1) -> tuple[LayerInfo, bytes]:
    out = io.BytesIO()
    info = write_dir_layer(src, prefix, out, mtime=mtime, compresslevel=level)
    return info, out.getvalue()


def test_reproducible_across_umask_mtime_owner(tmp_path):
    a = _make_tree(tmp_path / "a", umask=0o022, mtime=1_000_000, owner=0)
    b = _make_tree(tmp_path / "elsewhere-b", umask=0o077, mtime=1_700_000_000, owner=12345)
    info_a, data_a = _layer(a)
    info_b, data_b = _layer(b)
    assert info_a == info_b
    assert data_a == data_b


def test_layer_info_hashes_match_bytes(tmp_path):
    src = _make_tree(tmp_path / "t", umask=0o022, mtime=5, owner=0)
    info, data = _layer(src)
    assert info.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert info.diff_id == "sha256:" + hashlib.sha256(gzip.decompress(data)).hexdigest()
    assert info.size == len(data)
    # gzip header: no name flag, mtime 0, OS 255
    assert data[:4] == b"\x1f\x8b\x08\x00" and data[4:8] == b"\0\0\0\0" and data[9] == 255


def test_normalisation(tmp_path):
    src = _make_tree(tmp_path / "t", umask=0o077, mtime=123456789, owner=4242)
    _, data = _layer(src, mtime=42)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert names[:3] == ["opt", "opt/lemonpack", "opt/lemonpack/recipe"]
        assert names == sorted(names, key=lambda n: n.encode())
        seen = set()
        for m in members:
            parent = os.path.dirname(m.name)
            assert parent == "" or parent in seen, f"{m.name} before its parent"
            seen.add(m.name)
            assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (42, 0, 0, "", "")
            assert set(m.pax_headers) <= {"path", "linkpath"}
            if m.isdir():
                assert m.mode == 0o755
            elif m.issym():
                assert m.mode == 0o777
            else:
                assert m.isreg()
        by = {m.name: m for m in members}
        p = "opt/lemonpack/recipe/"
        assert by[p + "bin/engine"].mode == 0o755
        assert by[p + "bin/hardlink"].isreg() and by[p + "bin/hardlink"].mode == 0o755
        assert tar.extractfile(by[p + "bin/hardlink"]).read() == b"#!/bin/sh\necho engine\n"
        assert by[p + "lib/deep/data.bin"].mode == 0o644
        assert by[p + "lib/link"].linkname == "deep/data.bin"
        assert tar.extractfile(by[p + "lib/é-unicode.txt"]).read() == "héllo".encode()
        assert by[p + "lib/" + "long" * 40].size == 9


def test_gnu_tar_lists_the_layer(tmp_path):
    src = _make_tree(tmp_path / "t", umask=0o022, mtime=5, owner=0)
    out = tmp_path / "layer.tgz"
    with open(out, "wb") as f:
        write_dir_layer(src, "opt/x", f, mtime=0, compresslevel=6)
    listing = subprocess.run(["tar", "-tzvf", str(out)], check=True, capture_output=True, text=True).stdout
    assert "opt/x/bin/engine" in listing and "root/root" not in listing


def test_empty_prefix_and_empty_dir(tmp_path):
    (tmp_path / "e").mkdir()
    info, data = _layer(tmp_path / "e", prefix="")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.getmembers() == []
    assert len(gzip.decompress(data)) % 10240 == 0


def test_compresslevel_changes_digest_not_diff_id(tmp_path):
    src = _make_tree(tmp_path / "t", umask=0o022, mtime=5, owner=0)
    fast, _ = _layer(src, level=1)
    best, _ = _layer(src, level=9)
    assert fast.diff_id == best.diff_id and fast.digest != best.digest


def test_big_file_streams(tmp_path):
    src = tmp_path / "big"
    src.mkdir()
    with open(src / "f", "wb") as f:
        f.write(os.urandom(3 << 20) + b"\0" * (5 << 20) + b"tail")
    out = tmp_path / "l.tgz"
    with open(out, "wb") as f:
        info = write_dir_layer(src, "p", f, mtime=0, compresslevel=1)
    data = out.read_bytes()
    assert info.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    with tarfile.open(out) as tar:
        assert tar.extractfile("p/f").read() == (src / "f").read_bytes()


def test_files_layer(tmp_path):
    out = io.BytesIO()
    info = write_files_layer([("/etc/lemonpack/recipe.json", b"{}", 0o600),
                              ("usr/bin/run", b"#!/bin/sh\n", 0o700)], out, mtime=7, compresslevel=1)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        got = [(m.name, m.type, m.mode, m.mtime) for m in tar.getmembers()]
    assert got == [
        ("etc", tarfile.DIRTYPE, 0o755, 7), ("etc/lemonpack", tarfile.DIRTYPE, 0o755, 7),
        ("etc/lemonpack/recipe.json", tarfile.REGTYPE, 0o644, 7),
        ("usr", tarfile.DIRTYPE, 0o755, 7), ("usr/bin", tarfile.DIRTYPE, 0o755, 7),
        ("usr/bin/run", tarfile.REGTYPE, 0o755, 7),
    ]
    again = write_files_layer([("usr/bin/run", b"#!/bin/sh\n", 0o755),
                               ("etc/lemonpack/recipe.json", b"{}", 0o644)], io.BytesIO(), mtime=7,
                              compresslevel=1)
    assert again == info


@pytest.mark.parametrize("bad", [[("../x", b"", 0o644)], [("a/./b", b"", 0o644)], [("", b"", 0o644)]])
def test_files_layer_rejects_unsafe_paths(bad):
    with pytest.raises(UnsafeContentError):
        write_files_layer(bad, io.BytesIO(), mtime=0, compresslevel=1)


def test_files_layer_rejects_duplicates():
    with pytest.raises(ValueError):
        write_files_layer([("a", b"", 0), ("a", b"", 0)], io.BytesIO(), mtime=0, compresslevel=1)
    with pytest.raises(ValueError):
        write_files_layer([("a", b"", 0), ("a/b", b"", 0)], io.BytesIO(), mtime=0, compresslevel=1)


def test_rejects_fifo(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UnsafeContentError, match="fifo"):
        _layer(tmp_path)


def test_rejects_socket(tmp_path):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(tmp_path / "sock"))
        with pytest.raises(UnsafeContentError, match="socket"):
            _layer(tmp_path)
    finally:
        s.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_rejects_device(tmp_path):
    import stat
    os.mknod(tmp_path / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    with pytest.raises(UnsafeContentError, match="device"):
        _layer(tmp_path)


@pytest.mark.parametrize("target", ["../../outside", "a/../x", "/etc/passwd", "../..", "./../../x"])
def test_rejects_escaping_symlinks(tmp_path, target):
    (tmp_path / "sub").mkdir()
    os.symlink(target, tmp_path / "sub" / "link")
    with pytest.raises(UnsafeContentError, match="symlink"):
        _layer(tmp_path)


def test_allows_symlinks_inside(tmp_path, require_tool):
    """Links that resolve inside are stored as links with their targets unchanged, and
    umoci (the oracle) unpacks them to the same files."""
    require_tool("umoci")
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "f").write_text("x")
    os.symlink("../f", src / "sub" / "up")
    os.symlink("sub", src / "dirlink")
    os.symlink("dirlink/up", src / "chain")  # through a link to a dir, then up: still inside
    info, data = _layer(src, prefix="opt/x")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        links = {m.name: m.linkname for m in tar.getmembers() if m.issym()}
    assert links == {"opt/x/sub/up": "../f", "opt/x/dirlink": "sub", "opt/x/chain": "dirlink/up"}
    from lemonpack.oci import LayoutWriter, MEDIA_TYPE_LAYER_TAR_GZIP
    with LayoutWriter(tmp_path / "layout") as lw:
        layer = lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP,
                                 lambda f: write_dir_layer(src, "opt/x", f, mtime=0))
        lw.set_tags({"t": lw.add_image_manifest({"architecture": "amd64", "os": "linux"}, [layer])})
    bundle = tmp_path / "bundle"
    done = subprocess.run(["umoci", "unpack", "--rootless", "--image", f"{tmp_path / 'layout'}:t", str(bundle)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    root = bundle / "rootfs" / "opt" / "x"
    for name in ("sub/up", "chain"):
        assert (root / name).is_symlink() and (root / name).read_text() == "x"
        assert (root / name).resolve().is_relative_to(bundle / "rootfs")


@pytest.mark.parametrize("links", [
    {"s": ".", "escape": "s/../etc"},  # each lexically inside; s/.. is the root's parent
    {"d/s": "..", "d/t": "s/s/x"},  # d/s is the root, root/s is missing: a downward tail, inside
])
def test_symlink_chains_judged_by_resolution(tmp_path, links):
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    for name, target in links.items():
        os.symlink(target, src / name)
    if "escape" in links:
        with pytest.raises(UnsafeContentError, match="'escape'.*outside") as e:
            _layer(src)
        assert str(src) not in str(e.value)  # names the path in the tree, not the disk
    else:
        _layer(src)


def test_symlink_loop_refused(tmp_path):
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    with pytest.raises(UnsafeContentError, match="more than 40 symlinks"):
        _layer(tmp_path)


@pytest.mark.parametrize("name", [".wh.x", ".wh..wh..opq", "lib/.wh.", "d/.wh.sub/file"])
def test_whiteout_names_refused(tmp_path, name):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    with pytest.raises(UnsafeContentError, match="whiteout") as e:
        _layer(tmp_path)
    assert str(tmp_path) not in str(e.value)


def test_rejects_bad_prefix(tmp_path):
    with pytest.raises(UnsafeContentError):
        _layer(tmp_path, prefix="opt/../etc")


def test_error_leaves_no_thread_running(tmp_path):
    import threading
    os.mkfifo(tmp_path / "zz-fifo")
    (tmp_path / "a").write_bytes(os.urandom(3 << 20))
    before = threading.active_count()
    with pytest.raises(UnsafeContentError):
        _layer(tmp_path)
    assert threading.active_count() == before


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_parallel_compression_same_bytes_whatever_the_workers_and_writes(compression, monkeypatch):
    """Blocks are cut at fixed tar offsets and compressed independently: neither the thread
    count nor how the tar arrives changes a byte; the stream decompresses to the tar."""
    import gzip as _gzip
    import hashlib as _hashlib
    import io as _io
    import os as _os
    import random as _random

    import zstandard

    import lemonpack.oci.layer as layer_mod

    data = _os.urandom(3 << 20) + b"log line 12345 alpha beta\n" * 200_000
    outs = set()
    rnd = _random.Random(7)
    for workers in (1, 2, 4):
        monkeypatch.setattr(layer_mod, "_workers", lambda w=workers: w)
        buf = _io.BytesIO()
        pipe = layer_mod._Pipeline(buf, 1, compression)
        i = 0
        while i < len(data):
            n = rnd.choice([1, 512, 4096, 1 << 20, (1 << 20) + 7, 3 << 20])
            pipe.write(data[i:i + n])
            i += n
        diff_id, digest, size = pipe.finish()
        out = buf.getvalue()
        assert digest == "sha256:" + _hashlib.sha256(out).hexdigest() and size == len(out)
        assert diff_id == "sha256:" + _hashlib.sha256(data).hexdigest()
        plain = _gzip.decompress(out) if compression == "gzip" else \
            zstandard.ZstdDecompressor().stream_reader(_io.BytesIO(out)).read()
        assert plain == data
        outs.add(out)
    assert len(outs) == 1


def test_incompressible_blocks_are_stored_and_the_rest_deflated():
    """A 1 MiB block whose four samples do not shrink (random bytes) is stored: the layer is
    its input plus a few bytes of framing per 64 KiB, and cost no deflate; a block with a
    compressible sample is deflated whole. Either way the stream is gzip's, read back by the
    standard library and by GNU gzip."""
    import gzip as _gzip
    import random as _random
    import shutil as _shutil
    import subprocess as _subprocess

    import lemonpack.oci.layer as layer_mod

    rnd = _random.Random(3)
    noise = rnd.randbytes(4 << 20)
    buf = io.BytesIO()
    pipe = layer_mod._Pipeline(buf, 2)
    pipe.write(noise)
    pipe.finish()
    stored = buf.getvalue()
    assert len(noise) < len(stored) < len(noise) * 1.001
    assert _gzip.decompress(stored) == noise

    # the same noise with a compressible quarter in each block: every block is deflated
    mixed = bytearray(noise)
    for off in range(0, len(mixed), 1 << 20):
        mixed[off + (1 << 18):off + (1 << 19)] = b"x" * (1 << 18)
    buf = io.BytesIO()
    pipe = layer_mod._Pipeline(buf, 2)
    pipe.write(bytes(mixed))
    pipe.finish()
    deflated = buf.getvalue()
    assert len(deflated) < len(mixed) * 0.8
    assert _gzip.decompress(deflated) == bytes(mixed)
    if _shutil.which("gzip"):
        for data, plain in ((stored, noise), (deflated, bytes(mixed))):
            assert _subprocess.run(["gzip", "-dc"], input=data, capture_output=True, check=True).stdout == plain


def test_deflater_names_the_pinned_zlib_ng():
    """What the bytes depend on besides the input is named with its version (the layer cache
    keys by it, ``build --dry-run`` prints it)."""
    from zlib_ng import zlib_ng

    from lemonpack.oci.layer import deflater

    assert deflater() == f"zlib-ng {zlib_ng.ZLIBNG_VERSION}"
