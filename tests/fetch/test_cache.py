"""The artifact store and extraction against the file system's own refusals (trial k2/k3):
entries that are not regular files, members whose names the file system refuses, a disk
that refuses writes. Real files, real kernel errors; nothing mocked."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from lemonpack.errors import StorageError, UnsafeContentError
from lemonpack.fetch import ArtifactCache, extract
from support.helpers import ENTRY_SHAPES, reshape_entry
from lemonpack.fetch.staging import clear_non_regular, ensure_dir, open_regular, remove_entry, remove_tree

GOOD = b"good bytes"
HEX = hashlib.sha256(GOOD).hexdigest()


def _store(tmp_path: Path) -> tuple[ArtifactCache, Path]:
    cache = ArtifactCache(tmp_path / "cache" / "artifacts")
    fh, tmp = cache.staging()
    fh.write(GOOD)
    return cache, cache.commit(fh, tmp, HEX)


KINDS = list(ENTRY_SHAPES)


@pytest.mark.parametrize("kind", KINDS)
def test_entry_that_is_not_a_regular_file_is_never_used(tmp_path, kind):
    cache, entry = _store(tmp_path)
    outside = tmp_path / "outside"
    reshape_entry(entry, kind, outside)
    listed = list(cache.entries())
    assert [(e.digest, e.problem is not None) for e in listed] == [("sha256:" + HEX, True)]
    assert cache.verified(HEX) is None  # dropped, not followed, never blocks on a fifo
    assert not os.path.lexists(entry)
    if kind.startswith("symlink"):
        assert outside.exists() and (outside.is_file() or (outside / "keep").exists())


@pytest.mark.parametrize("kind", KINDS)
def test_commit_replaces_whatever_holds_the_name(tmp_path, kind):
    cache, entry = _store(tmp_path)
    outside = tmp_path / "outside"
    reshape_entry(entry, kind, outside)
    fh, tmp = cache.staging()
    fh.write(GOOD)
    assert cache.commit(fh, tmp, HEX) == entry
    assert stat.S_ISREG(os.lstat(entry).st_mode) and entry.read_bytes() == GOOD
    assert cache.verified(HEX) == entry


def test_store_directories_that_are_files_are_replaced(tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    (root / "artifacts").write_text("junk")
    cache = ArtifactCache(root / "artifacts")
    assert list(cache.entries()) == []
    fh, tmp = cache.staging()
    fh.write(GOOD)
    assert cache.commit(fh, tmp, HEX).read_bytes() == GOOD


def test_open_regular_refuses_every_other_kind(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to(tmp_path / "f")
    os.mkfifo(tmp_path / "p")
    with open_regular(tmp_path / "f") as f:
        assert f.read() == b"x"
    for name, code in (("d", errno.EISDIR), ("l", errno.ELOOP), ("p", errno.EINVAL)):
        with pytest.raises(OSError) as exc:
            open_regular(tmp_path / name)
        assert exc.value.errno == code, name


def test_removal_never_follows_a_symlink(tmp_path):
    target = tmp_path / "target"
    (target / "sub").mkdir(parents=True)
    (target / "sub").chmod(0o500)
    link = tmp_path / "link"
    link.symlink_to(target)
    remove_tree(link)
    assert not os.path.lexists(link) and (target / "sub").stat().st_mode & 0o777 == 0o500
    link.symlink_to(target)
    remove_entry(link)
    assert not os.path.lexists(link) and target.is_dir()
    link.symlink_to(target)
    assert clear_non_regular(link) == "symlink" and target.is_dir()
    (tmp_path / "base" / "a").mkdir(parents=True)
    (tmp_path / "base" / "a" / "b").write_text("file where a directory belongs")
    assert ensure_dir(tmp_path / "base" / "a" / "b" / "c", tmp_path / "base") == [tmp_path / "base" / "a" / "b"]
    assert (tmp_path / "base" / "a" / "b" / "c").is_dir()


# ------------------------------------------------------------------ extraction: the file system refuses

def _tar(path: Path, names: list[str]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for n in names:
            ti = tarfile.TarInfo(n)
            ti.size = 1
            tf.addfile(ti, io.BytesIO(b"x"))
    return path


def _zip(path: Path, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for n in names:
            zf.writestr(n, b"x")
    return path


@pytest.mark.parametrize("make", [_tar, _zip], ids=["tar", "zip"])
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
