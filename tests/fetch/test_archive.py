"""extract() (lemonpack/fetch/archive.py): real archives (built with tarfile, zipfile and the system tar),
hostile ones, and members or writes the file system itself refuses."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from lemonpack.errors import StorageError, UnsafeContentError
from lemonpack.fetch import ArtifactCache, detect_format, extract


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode, format=tarfile.PAX_FORMAT) as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            else:
                tf.addfile(info)
    return path


def _info(name: str, type_=tarfile.REGTYPE, mode=0o644, linkname="") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname, info.mtime = type_, mode, linkname, 1_700_000_000
    return info


def _siblings(dest: Path) -> list[str]:
    return sorted(os.listdir(dest.parent))


@pytest.mark.parametrize("mode,suffix", [("w:gz", ".tar.gz"), ("w:xz", ".tar.xz"), ("w:bz2", ".tar.bz2"),
                                         ("w", ".tar")])
def test_tar_formats(tmp_path, mode, suffix):
    payload = os.urandom(70000)
    arc = _tar(tmp_path / f"a{suffix}", [
        (_info("pkg", tarfile.DIRTYPE, 0o755), None),
        (_info("pkg/bin/llama-server", mode=0o755), payload),
        (_info("pkg/lib/libx.so.1", mode=0o644), b"lib"),
        (_info("pkg/lib/libx.so", tarfile.SYMTYPE, 0o777, "libx.so.1"), None),
        (_info("pkg/bin/alias", tarfile.LNKTYPE, 0o755, "pkg/bin/llama-server"), None),
    ], mode)
    # name hint deliberately uninformative: detection is by content
    assert detect_format(arc, "download") == "tar"
    dest = tmp_path / "out" / "engine"
    extract(arc, dest, name_hint="download")
    exe = dest / "pkg/bin/llama-server"
    assert exe.read_bytes() == payload and stat.S_IMODE(exe.stat().st_mode) == 0o755
    assert os.readlink(dest / "pkg/lib/libx.so") == "libx.so.1"
    assert (dest / "pkg/lib/libx.so").read_bytes() == b"lib"
    assert os.path.samefile(dest / "pkg/bin/alias", exe)
    assert int(exe.stat().st_mtime) == 1_700_000_000
    assert _siblings(dest) == ["engine"]


def test_system_tar_archive(tmp_path):
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f.txt").write_text("hi")
    os.symlink("f.txt", src / "d" / "ln")
    arc = tmp_path / "sys.tgz"
    subprocess.run(["tar", "-czf", str(arc), "-C", str(src), "."], check=True)
    dest = tmp_path / "x"
    extract(arc, dest, name_hint="sys.tgz")
    assert (dest / "d" / "f.txt").read_text() == "hi" and os.readlink(dest / "d" / "ln") == "f.txt"


def test_zip(tmp_path):
    arc = tmp_path / "w.zip"
    with zipfile.ZipFile(arc, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("engine/", "")
        zi = zipfile.ZipInfo("engine/run.exe")
        zi.external_attr = (stat.S_IFREG | 0o755) << 16
        zi.create_system = 3
        zf.writestr(zi, b"MZ" + os.urandom(5000))
        zf.writestr("engine/readme.txt", "plain")  # zipfile's default unix mode: 0600
        zd = zipfile.ZipInfo("engine/dos.txt")
        zd.create_system = 0  # MS-DOS: no unix mode, gets 0644
        zf.writestr(zd, "dos")
        zl = zipfile.ZipInfo("engine/link")
        zl.create_system = 3
        zl.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(zl, "readme.txt")
    assert detect_format(arc, "w.zip") == "zip"
    dest = tmp_path / "z"
    extract(arc, dest, name_hint="w.zip")
    assert stat.S_IMODE((dest / "engine/run.exe").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "engine/readme.txt").stat().st_mode) == 0o600
    assert stat.S_IMODE((dest / "engine/dos.txt").stat().st_mode) == 0o644
    assert os.readlink(dest / "engine/link") == "readme.txt"


def test_single_file_and_compressed_single_file(tmp_path):
    raw = tmp_path / "blob"
    raw.write_bytes(b"\x7fELF" + os.urandom(1000))
    dest = tmp_path / "one"
    extract(raw, dest, name_hint="llama-server")
    assert (dest / "llama-server").read_bytes() == raw.read_bytes()
    assert stat.S_IMODE((dest / "llama-server").stat().st_mode) == 0o755
    gz = tmp_path / "m.gguf.gz"
    gz.write_bytes(gzip.compress(b"GGUF" + os.urandom(2000)))
    assert detect_format(gz, "m.gguf.gz") == "file"
    extract(gz, tmp_path / "two", name_hint="m.gguf.gz")
    assert (tmp_path / "two" / "m.gguf.gz").read_bytes() == gz.read_bytes()


@pytest.mark.parametrize("hint", ["", ".", "..", "a/b", "../x", "a\\b", "a\x00b"])
def test_single_file_bad_hint(tmp_path, hint):
    raw = tmp_path / "blob"
    raw.write_bytes(b"x")
    with pytest.raises(UnsafeContentError):
        extract(raw, tmp_path / "d", name_hint=hint)
    assert _siblings(tmp_path / "d") == ["blob"]


def test_setuid_setgid_stripped(tmp_path):
    arc = _tar(tmp_path / "s.tar.gz", [(_info("suid", mode=0o6755), b"x"), (_info("sticky", tarfile.DIRTYPE, 0o1777), None)])
    dest = tmp_path / "d"
    extract(arc, dest, name_hint="s.tar.gz")
    assert stat.S_IMODE((dest / "suid").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "sticky").stat().st_mode) == 0o777


def _device(name, type_):
    info = _info(name, type_, 0o600)
    info.devmajor, info.devminor = 1, 3
    return info


HOSTILE = {
    "absolute": [(_info("/etc/evil"), b"x")],
    "dotdot": [(_info("ok.txt"), b"fine"), (_info("../x"), b"x")],
    "dotdot-inner": [(_info("a/../../x"), b"x")],
    "backslash": [(_info("ok.txt"), b"fine"), (_info("a\\..\\..\\x"), b"x")],  # a way out on Windows
    "symlink-abs": [(_info("etc", tarfile.SYMTYPE, 0o777, "/etc"), None)],
    "symlink-escape": [(_info("a/up", tarfile.SYMTYPE, 0o777, "../../outside"), None)],
    "symlink-then-write": [(_info("d", tarfile.DIRTYPE, 0o755), None),
                           (_info("d/self", tarfile.SYMTYPE, 0o777, "."), None),
                           (_info("d/self/f"), b"through a symlink")],
    "hardlink-escape": [(_info("h", tarfile.LNKTYPE, 0o644, "../../etc/passwd"), None)],
    "hardlink-abs": [(_info("h", tarfile.LNKTYPE, 0o644, "/etc/passwd"), None)],
    "hardlink-to-symlink": [(_info("s", tarfile.SYMTYPE, 0o777, "x"), None),
                            (_info("h", tarfile.LNKTYPE, 0o644, "s"), None)],
    "char-device": [(_device("null", tarfile.CHRTYPE), None)],
    "block-device": [(_device("sda", tarfile.BLKTYPE), None)],
    "fifo": [(_info("pipe", tarfile.FIFOTYPE), None)],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_tar_rejected_leaving_nothing(tmp_path, case):
    arc = _tar(tmp_path / "evil.tar.gz", HOSTILE[case])
    dest = tmp_path / "out" / "dest"
    with pytest.raises(UnsafeContentError) as info:
        extract(arc, dest, name_hint="evil.tar.gz")
    member = HOSTILE[case][-1][0].name
    assert str(arc) in str(info.value) and repr(member) in str(info.value)
    assert not dest.exists() and os.listdir(tmp_path / "out") == []
    assert not (tmp_path / "outside").exists() and not (tmp_path / "x").exists()


@pytest.mark.parametrize("name", ["/abs.txt", "../up.txt", "a/../../up.txt", "..\\up.txt", "C:/up.txt"])
def test_hostile_zip_rejected(tmp_path, name):
    arc = tmp_path / "evil.zip"
    with zipfile.ZipFile(arc, "w") as zf:
        zf.writestr("ok.txt", "ok")
        zf.writestr(zipfile.ZipInfo(name), "x")  # ZipInfo keeps the name as given
    with zipfile.ZipFile(arc) as zf:
        assert zf.namelist()[-1] == name
    dest = tmp_path / "out" / "d"
    with pytest.raises(UnsafeContentError, match="unsafe member"):
        extract(arc, dest, name_hint="evil.zip")
    assert os.listdir(tmp_path / "out") == []


def test_zip_symlink_escape_rejected(tmp_path):
    arc = tmp_path / "evil.zip"
    with zipfile.ZipFile(arc, "w") as zf:
        zl = zipfile.ZipInfo("etc")
        zl.create_system = 3
        zl.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(zl, "/etc")
    with pytest.raises(UnsafeContentError):
        extract(arc, tmp_path / "out" / "d", name_hint="evil.zip")
    assert os.listdir(tmp_path / "out") == []


def test_existing_nonempty_dest_refused(tmp_path):
    arc = _tar(tmp_path / "a.tar.gz", [(_info("f"), b"new")])
    dest = tmp_path / "d"
    dest.mkdir()
    (dest / "keep").write_text("old")
    with pytest.raises(FileExistsError):
        extract(arc, dest, name_hint="a.tar.gz")
    assert os.listdir(dest) == ["keep"]
    empty = tmp_path / "e"
    empty.mkdir()
    extract(arc, empty, name_hint="a.tar.gz")
    assert (empty / "f").read_bytes() == b"new"


def test_corrupt_tar_leaves_nothing(tmp_path):
    good = _tar(tmp_path / "g.tar.gz", [(_info("big"), os.urandom(200000))])
    bad = tmp_path / "t.tar.gz"
    bad.write_bytes(good.read_bytes()[:-5000])
    dest = tmp_path / "out" / "d"
    with pytest.raises((tarfile.TarError, OSError, EOFError)):
        extract(bad, dest, name_hint="t.tar.gz")
    assert os.listdir(tmp_path / "out") == []


def test_corrupt_deflate_data_is_refused_as_corrupt_and_leaves_nothing(tmp_path):
    """zlib-ng inflates gzip tars: damaged compressed bytes are refused with what
    :func:`extract` documents for a corrupt archive (a ``TarError``, an ``OSError`` without
    an errno such as ``gzip.BadGzipFile``, ``EOFError``: what the builder reports as "not a
    readable archive"), never zlib-ng's own exception class, and nothing is left."""
    text = b"".join(b"line %d of a log that compresses\n" % i for i in range(40000))
    good = _tar(tmp_path / "g.tar.gz", [(_info("a.log"), text), (_info("b.log"), text[::-1])]).read_bytes()
    for n, at in enumerate(range(len(good) // 8, len(good) // 2, len(good) // 16)):  # in the members
        data = bytearray(good)
        for i in range(at, at + 64):  # past the header detect_format reads, inside the deflate stream
            data[i] ^= 0x5A
        bad = tmp_path / f"t{n}.tar.gz"
        bad.write_bytes(bytes(data))
        dest = tmp_path / f"out{n}" / "d"
        with pytest.raises((tarfile.TarError, OSError, EOFError)) as err:
            extract(bad, dest, name_hint="t.tar.gz")
        assert isinstance(err.value, (tarfile.TarError, EOFError)) or err.value.errno is None, err.value
        assert os.listdir(dest.parent) == []


def test_gzip_of_several_members_is_one_tar(tmp_path):
    """A gzip file may hold several members (``cat a.gz b.gz``, pigz): the tar is their
    concatenation, as ``tar -xzf`` reads it."""
    import gzip

    plain = tmp_path / "p.tar"
    _tar(plain, [(_info("a"), b"alpha" * 1000), (_info("b"), os.urandom(70000))], mode="w")
    raw = plain.read_bytes()
    arc = tmp_path / "m.tar.gz"
    arc.write_bytes(gzip.compress(raw[:30000], 1) + gzip.compress(raw[30000:], 9))
    extract(arc, tmp_path / "d", name_hint="m.tar.gz")
    with tarfile.open(plain) as tf:
        for m in tf:
            assert (tmp_path / "d" / m.name).read_bytes() == tf.extractfile(m).read()


def test_read_only_dirs_cleaned_on_failure(tmp_path):
    arc = _tar(tmp_path / "ro.tar.gz", [(_info("ro", tarfile.DIRTYPE, 0o555), None),
                                         (_info("ro/f"), b"x"), (_info("../boom"), b"x")])
    with pytest.raises(UnsafeContentError):
        extract(arc, tmp_path / "out" / "d", name_hint="ro.tar.gz")
    assert os.listdir(tmp_path / "out") == []
    shutil.rmtree(tmp_path / "out")


def test_fetch_then_extract(server, tmp_path):
    """The two halves together: a served tar.gz, fetched into the cache, extracted from it."""
    from urllib.parse import urlsplit

    from lemonpack.fetch import fetch

    arc = _tar(tmp_path / "engine.tar.gz", [(_info("bin/llama-server", mode=0o755), b"#!/bin/sh\necho hi\n")])
    data = arc.read_bytes()
    url = server.put("releases/engine.tar.gz", data)
    got = fetch(url, sha256="sha256:" + hashlib.sha256(data).hexdigest(),
                cache=ArtifactCache(tmp_path / "cache"), progress=False)
    dest = tmp_path / "engines" / got.sha256
    extract(got.path, dest, name_hint=urlsplit(url).path.rsplit("/", 1)[-1])
    assert os.access(dest / "bin/llama-server", os.X_OK)


def _zip_link(zf: zipfile.ZipFile, name: str, target: str) -> None:
    zl = zipfile.ZipInfo(name)
    zl.create_system = 3
    zl.external_attr = (stat.S_IFLNK | 0o777) << 16
    zf.writestr(zl, target)


def test_zip_symlink_chain_judged_by_resolution(tmp_path):
    """Each link lexically inside, the chain outside (case 02, as a zip): refused, naming
    the member and the label, never the temp directory."""
    arc = tmp_path / "chain.zip"
    with zipfile.ZipFile(arc, "w") as zf:
        zf.writestr("a/b/keep", b"x")
        _zip_link(zf, "a/b/s", "../..")
        _zip_link(zf, "run", "a/b/s/../bin/sh")
    with pytest.raises(UnsafeContentError, match=r"artifact X: unsafe member 'run': .*resolves outside") as e:
        extract(arc, tmp_path / "out" / "d", name_hint="chain.zip", label="artifact X")
    assert str(tmp_path) not in str(e.value)
    assert os.listdir(tmp_path / "out") == []


def test_links_inside_kept_and_resolving(tmp_path):
    arc = _tar(tmp_path / "ok.tar.gz", [
        (_info("lib/sub", tarfile.DIRTYPE, 0o755), None), (_info("lib/sub/real"), b"payload"),
        (_info("lib/cur", tarfile.SYMTYPE, linkname="sub"), None),
        (_info("lib/up", tarfile.SYMTYPE, linkname="cur/../sub/real"), None),
        (_info("top", tarfile.SYMTYPE, linkname="lib/up"), None)])
    extract(arc, tmp_path / "d", name_hint="ok.tar.gz")
    assert (tmp_path / "d" / "top").read_bytes() == b"payload"
    assert os.readlink(tmp_path / "d" / "lib" / "up") == "cur/../sub/real"


@pytest.mark.parametrize("members, why", [
    ([("a", tarfile.SYMTYPE, "x/../../etc"), ("x", tarfile.SYMTYPE, ".")], "'..' after 'x'"),
    ([("d", tarfile.DIRTYPE, ""), ("l", tarfile.SYMTYPE, "d"), ("l", tarfile.SYMTYPE, ".")], "replaces the symlink"),
    ([("d", tarfile.DIRTYPE, ""), ("h", tarfile.REGTYPE, ""), ("d", tarfile.LNKTYPE, "h")], "over an existing directory"),
    ([("x/.wh.y", tarfile.REGTYPE, "")], "whiteout"),
])
def test_later_members_cannot_change_what_was_checked(tmp_path, members, why):
    arc = _tar(tmp_path / "m.tar.gz", [(_info(n, t, 0o755, l), b"" if t == tarfile.REGTYPE else None)
                                       for n, t, l in members])
    with pytest.raises(UnsafeContentError, match=why):
        extract(arc, tmp_path / "out" / "d", name_hint="m.tar.gz")
    assert os.listdir(tmp_path / "out") == []


# ------------------------------------------------------------------ extraction: the file system refuses

def _tar_named(path: Path, names: list[str]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for n in names:
            ti = tarfile.TarInfo(n)
            ti.size = 1
            tf.addfile(ti, io.BytesIO(b"x"))
    return path


def _zip_named(path: Path, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for n in names:
            zf.writestr(n, b"x")
    return path


@pytest.mark.parametrize("make", [_tar_named, _zip_named], ids=["tar", "zip"])
@pytest.mark.parametrize("name", ["y" * 256, "a/" + "y" * 300, "/".join(["d" * 255] * 17) + "/f"],
                         ids=["component-256", "nested-300", "path-over-4096"])
def test_member_name_the_file_system_refuses_is_unsafe_naming_it(tmp_path, make, name):
    archive = make(tmp_path / "a", ["ok", name])
    dest = tmp_path / "work" / "out"
    with pytest.raises(UnsafeContentError) as exc:
        extract(archive, dest, name_hint="a.tar.gz", label="artifact X")
    msg = str(exc.value)
    assert msg.startswith(f"artifact X: unsafe member {name!r}: the file system refuses it: File name too long")
    assert str(tmp_path) not in msg  # no scratch path
    assert list((tmp_path / "work").iterdir()) == []  # nothing left


def test_long_single_file_name_is_unsafe(tmp_path):
    src = tmp_path / "blob"
    src.write_bytes(b"not an archive")
    with pytest.raises(UnsafeContentError, match="File name too long"):
        extract(src, tmp_path / "work" / "out", name_hint="z" * 300, label="artifact X")
    assert list((tmp_path / "work").iterdir()) == []


_LIMITED = """
import resource, signal, sys
from pathlib import Path
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
from lemonpack.errors import StorageError
from lemonpack.fetch import extract
try:
    extract(Path(sys.argv[1]), Path(sys.argv[2]), name_hint="a.tar.gz", label="artifact X")
except StorageError as e:
    print(type(e).__name__, e.exit_code, e)
"""


def test_disk_refusing_a_write_is_a_storage_error(tmp_path):
    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        ti = tarfile.TarInfo("big")
        ti.size = 1 << 20
        tf.addfile(ti, io.BytesIO(bytes(1 << 20)))
    out = subprocess.run([sys.executable, "-c", _LIMITED, str(archive), str(tmp_path / "work" / "out")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("StorageError 1 artifact X: cannot unpack member 'big': File too large "
                                  "(a problem of the local disk, not of the archive)")
    assert list((tmp_path / "work").iterdir()) == []
    assert StorageError.exit_code == 1
