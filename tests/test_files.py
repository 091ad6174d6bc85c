"""lemonpack.files: replace_directory (a tree replaced in one step, or not at all), and the one
flock helper (locked, lock_fd)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from lemonpack import files
from lemonpack.errors import LemonpackError


def _tree(p, text):
    p.mkdir()
    (p / "f").write_text(text)
    sub = p / "ro"
    sub.mkdir()
    (sub / "g").write_text(text)
    os.chmod(sub, 0o500)  # read-only, as archives leave them: still removed
    return p


@pytest.mark.parametrize("exchange_works", [True, False])
def test_replace_puts_the_new_tree_and_removes_the_old(tmp_path, monkeypatch, exchange_works):
    if not exchange_works:
        def unsupported(a, b):
            raise OSError(errno.EINVAL, "not supported here")
        monkeypatch.setattr(files, "exchange", unsupported)
    target = _tree(tmp_path / "t", "old")
    new = _tree(tmp_path / "n", "new")
    files.replace_directory(new, target)
    assert (target / "f").read_text() == "new" and (target / "ro" / "g").read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["t"]  # nothing old, nothing staged left beside it


def test_replace_into_nothing_is_a_rename(tmp_path):
    new = _tree(tmp_path / "n", "new")
    files.replace_directory(new, tmp_path / "t")
    assert sorted(os.listdir(tmp_path)) == ["t"]


def test_a_failed_replace_leaves_the_target_as_it_was(tmp_path, monkeypatch):
    target = _tree(tmp_path / "t", "old")
    new = _tree(tmp_path / "n", "new")

    def full(a, b):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(files, "exchange", full)
    with pytest.raises(OSError):
        files.replace_directory(new, target)
    assert (target / "f").read_text() == "old" and (new / "f").read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["n", "t"]


def test_exchange_swaps_two_directories(tmp_path):
    a, b = _tree(tmp_path / "a", "A"), _tree(tmp_path / "b", "B")
    files.exchange(a, b)
    assert (a / "f").read_text() == "B" and (b / "f").read_text() == "A"


def test_read_user_file_follows_a_symlink_and_refuses_what_is_no_file_without_blocking(tmp_path):
    real = tmp_path / "key.pem"
    real.write_bytes(b"KEY")
    (tmp_path / "link.pem").symlink_to(real)
    assert files.read_user_file(tmp_path / "link.pem", "key file") == b"KEY"
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to-fifo").symlink_to(tmp_path / "fifo")
    cases = {"fifo": "not a regular file (a fifo)", "to-fifo": "not a regular file (a fifo)",
             "missing": "no such file", ".": "is a directory"}
    for name, reason in cases.items():
        with pytest.raises(LemonpackError) as e:
            files.read_user_file(tmp_path / name, "key file")
        assert str(e.value).startswith(f"cannot read key file {tmp_path / name}: {reason}")
        assert "\n" not in str(e.value)


def test_replace_file_replaces_in_one_step_and_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.yaml"
    files.replace_file(target, b"one\n")
    assert target.read_bytes() == b"one\n" and (target.stat().st_mode & 0o777) == 0o644
    files.replace_file(target, b"two\n", mode=0o600)
    assert target.read_bytes() == b"two\n" and (target.stat().st_mode & 0o777) == 0o600
    files.replace_file(target, b"three\n")
    assert (target.stat().st_mode & 0o777) == 0o600  # the replaced file's mode is kept
    with pytest.raises(OSError):
        files.replace_file(tmp_path / "missing-dir" / "x", b"four\n")
    (tmp_path / "blocker").mkdir()
    (tmp_path / "blocker" / "inner").write_text("x")
    with pytest.raises(OSError):  # a non-empty directory cannot be replaced by a file
        files.replace_file(tmp_path / "blocker", b"five\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker", "out.yaml"]  # no temporary left
    assert target.read_bytes() == b"three\n"


def test_replace_file_never_exposes_a_secret_under_a_wide_umask(tmp_path):
    """The temporary file is created 0600 and only then given the final mode, so a key
    written with mode 0600 is never readable by others, whatever the umask."""
    import os
    import stat

    from lemonpack.files import replace_file

    old = os.umask(0)
    try:
        replace_file(tmp_path / "k.key", b"secret", mode=0o600)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "k.key").stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["k.key"]


def test_commit_renames_a_finished_file_and_a_directory(tmp_path):
    from lemonpack.files import commit

    (tmp_path / "f.tmp").write_bytes(b"new")
    (tmp_path / "f").write_bytes(b"old")
    commit(tmp_path / "f.tmp", tmp_path / "f", durable=True)
    assert (tmp_path / "f").read_bytes() == b"new" and not (tmp_path / "f.tmp").exists()
    (tmp_path / "d.tmp").mkdir()
    (tmp_path / "d.tmp" / "x").write_text("x")
    commit(tmp_path / "d.tmp", tmp_path / "d", durable=False)
    assert (tmp_path / "d" / "x").read_text() == "x"


# -- locked / lock_fd: the one flock helper -----------------------------------------------------

_HOLDER = ("import sys, time\n"
           "from lemonpack.files import locked\n"
           "with locked(sys.argv[1], shared=sys.argv[2] == 'shared'):\n"
           "    print('held', flush=True)\n"
           "    time.sleep(60)\n")


def _holder(path, mode="exclusive"):
    """A child process holding the lock of ``path`` until killed (it says when it holds it)."""
    import subprocess
    import sys

    root = str(Path(files.__file__).resolve().parent.parent)  # this checkout's lemonpack, in the child too
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), mode], stdout=subprocess.PIPE, text=True,
                             env=env)
    assert child.stdout is not None and child.stdout.readline() == "held\n"
    return child


def _probe(path) -> bool:
    """Whether the lock of ``path`` could be taken exclusively right now (another open file description)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return files.lock_fd(fd, wait=False)
    finally:
        os.close(fd)


def test_locked_creates_a_private_lock_file_and_releases_it_however_the_block_exits(tmp_path):
    lock = tmp_path / "x.lock"
    with files.locked(lock):
        assert oct(lock.stat().st_mode & 0o777) == "0o600"
        assert not _probe(lock)
    assert _probe(lock)
    with pytest.raises(KeyError):
        with files.locked(lock):
            raise KeyError("inside")  # passes through unchanged
    assert _probe(lock) and lock.is_file()  # released, the file stays


def test_locked_waits_for_another_process_and_a_killed_holder_lets_go(tmp_path):
    import threading
    import time

    lock = tmp_path / "x.lock"
    child = _holder(lock)
    got = threading.Event()

    def take() -> None:
        with files.locked(lock):
            got.set()
    t = threading.Thread(target=take, daemon=True)
    t.start()
    time.sleep(0.3)
    assert not got.is_set()  # blocks while the child holds it
    child.kill()  # SIGKILL: the kernel drops the lock
    child.wait()
    assert got.wait(10)
    t.join(10)


def test_shared_locks_admit_each_other_not_an_exclusive_one(tmp_path):
    lock = tmp_path / "x.lock"
    child = _holder(lock, "shared")
    try:
        fd = os.open(lock, os.O_RDONLY)
        try:
            assert files.lock_fd(fd, shared=True, wait=False)  # a second reader is let in
        finally:
            os.close(fd)
        assert not _probe(lock)  # a writer is not
    finally:
        child.kill()
        child.wait()


def test_locked_locks_a_directory_itself(tmp_path):
    d = tmp_path / "staging"
    d.mkdir()
    with files.locked(d):
        assert not _probe(d)
    assert _probe(d) and sorted(os.listdir(d)) == []


def test_locked_refuses_what_it_cannot_lock_naming_the_path(tmp_path):
    from lemonpack.errors import StorageError

    with pytest.raises(StorageError, match=r"cannot lock .*/missing/x\.lock: No such file"):
        with files.locked(tmp_path / "missing" / "x.lock"):
            pass
    (tmp_path / "elsewhere").write_text("")
    (tmp_path / "link.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StorageError, match="link.lock"):
        with files.locked(tmp_path / "link.lock"):  # a planted symlink is not followed
            pass


def test_copy_file_is_an_independent_copy(tmp_path):
    """The copy has the bytes and is a file of its own: a write to it leaves the source as it
    was (what the layout's copy of a cached layer needs); a symlink source is refused."""
    from lemonpack.files import copy_file

    src = tmp_path / "src"
    data = os.urandom(3 << 20) + b"tail"
    src.write_bytes(data)
    assert copy_file(src, tmp_path / "dst") == len(data)
    dst = tmp_path / "dst"
    assert dst.read_bytes() == data
    assert os.stat(dst).st_ino != os.stat(src).st_ino and os.stat(src).st_nlink == 1
    with open(dst, "r+b") as f:
        f.write(b"changed")
    assert src.read_bytes() == data
    os.symlink(src, tmp_path / "link")
    with pytest.raises(OSError):
        copy_file(tmp_path / "link", tmp_path / "other")
    with pytest.raises(FileExistsError):
        copy_file(src, dst)


@pytest.fixture
def reflink_dir(tmp_path):
    """A directory on an XFS file system with reflinks (a loop-mounted image), or skip."""
    import shutil
    import subprocess

    if os.geteuid() != 0 or not shutil.which("mkfs.xfs"):
        pytest.skip("needs root and mkfs.xfs (xfsprogs)")
    image, mnt = tmp_path / "xfs.img", tmp_path / "mnt"
    with open(image, "wb") as f:
        f.truncate(320 << 20)
    mnt.mkdir()
    if subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], capture_output=True).returncode != 0 or \
            subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("cannot make and loop-mount an XFS image here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_copy_file_on_xfs_is_a_reflink_that_copies_on_write(reflink_dir):
    """On a file system that shares extents the copy moves no data (the free space does not
    shrink by the file's size) and stays copy-on-write: writing to the copy leaves the source."""
    from lemonpack.files import copy_file

    src = reflink_dir / "src"
    data = os.urandom(64 << 20)
    src.write_bytes(data)
    os.sync()
    free = os.statvfs(reflink_dir).f_bfree * os.statvfs(reflink_dir).f_frsize
    assert copy_file(src, reflink_dir / "dst") == len(data)
    os.sync()
    after = os.statvfs(reflink_dir).f_bfree * os.statvfs(reflink_dir).f_frsize
    assert free - after < 8 << 20  # shared extents, not 64 MiB more
    with open(reflink_dir / "dst", "r+b") as f:
        f.write(b"changed")
    assert src.read_bytes() == data and (reflink_dir / "dst").read_bytes()[7:] == data[7:]


def test_save_bounded_record_drops_the_oldest_keys_and_never_raises(tmp_path):
    import json

    doc = {f"k{i}": i for i in range(5)}
    target = tmp_path / "sub" / "record.json"
    assert files.save_bounded_record(target, doc, 3) is True
    assert json.loads(target.read_bytes()) == {"k2": 2, "k3": 3, "k4": 4}
    (tmp_path / "file").write_text("x")
    assert files.save_bounded_record(tmp_path / "file" / "record.json", {"a": 1}, 3) is False  # parent is a file
