"""``lemonpack.digest``: the text forms of a sha256 digest and the one hashing sink."""

from __future__ import annotations

import hashlib
import io
import json
import os
import threading
import time

import pytest

from lemonpack.digest import Digest, FileDigests, Hasher, HashingReader, file_digest, hex_of, names_sha256, sha256_text

HEX = hashlib.sha256(b"abc").hexdigest()


def test_text_forms_round_trip():
    d = Digest.of_bytes(b"abc")
    assert d.hex == HEX and str(d) == f"sha256:{HEX}" and d.algorithm == "sha256"
    assert Digest.parse(str(d)) == d == Digest.from_hex(HEX) == Digest.parse(HEX, bare=True)
    assert sha256_text(HEX) == str(d) and hex_of(str(d)) == HEX


@pytest.mark.parametrize("text", [HEX, f"sha256:{HEX.upper()}", f"sha512:{HEX}", f"sha256:{HEX[:63]}", "", None,
                                  f" sha256:{HEX}"])
def test_parse_refuses_anything_but_sha256_text(text):
    with pytest.raises(ValueError):
        Digest.parse(text)
    with pytest.raises(ValueError):
        hex_of(text)


@pytest.mark.parametrize("text", [f"sha256:{HEX}", "sha256:", "", "sha512:ab", None])
def test_bare_hex_is_refused_where_text_is_built(text):
    with pytest.raises(ValueError):
        sha256_text(text)


def test_names_sha256_tells_a_digest_reference_from_a_tag():
    assert names_sha256(f"sha256:{HEX}") and names_sha256("sha256:bad")
    assert not names_sha256("v1") and not names_sha256(None)


class _Out(io.BytesIO):
    flushed = 0

    def flush(self) -> None:
        self.flushed += 1
        super().flush()


def test_hasher_counts_hashes_and_tees_in_order():
    a, b = _Out(), _Out()
    h = Hasher(a, b)
    for piece in (b"a", memoryview(b"bc"), bytearray(b"de")):
        assert h.write(piece) == len(piece)
    h.flush()
    assert h.size == 5 and h.digest() == Digest.of_bytes(b"abcde")
    assert a.getvalue() == b.getvalue() == b"abcde" and a.flushed == b.flushed == 1
    assert Hasher().digest() == Digest.of_bytes(b"")


def test_threaded_hasher_writes_everything_before_its_digest():
    out = io.BytesIO()
    data = os.urandom(1 << 20)
    with Hasher(out, threaded=True, ahead=2) as h:
        for i in range(0, len(data), 4096):
            h.write(data[i:i + 4096])
        assert h.digest() == Digest.of_bytes(data)
    assert out.getvalue() == data and h.size == len(data)


class _Full:
    def write(self, data) -> int:
        raise OSError(28, "No space left on device")


def test_threaded_hasher_raises_the_writers_error_and_stops():
    with Hasher(_Full(), threaded=True) as h:
        with pytest.raises(OSError, match="No space"):
            for _ in range(100):
                h.write(b"x" * 1024)
            h.digest()
    assert not any(t.name == "lemonpack-hasher" and t.is_alive() for t in threading.enumerate())


def test_unthreaded_hasher_raises_the_outs_error_at_once():
    with pytest.raises(OSError, match="No space"):
        Hasher(_Full()).write(b"x")


def test_hashing_reader_sees_every_byte_read():
    r = HashingReader(io.BytesIO(b"hello world"))
    assert r.read(5) == b"hello" and r.read() == b" world" and r.read(3) == b""
    assert r.hasher.digest() == Digest.of_bytes(b"hello world") and r.hasher.size == 11


def test_file_digest_reads_regular_files_only(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    assert file_digest(tmp_path / "f") == (Digest.from_hex(HEX), 3)
    os.symlink(tmp_path / "f", tmp_path / "link")
    with pytest.raises(OSError):
        file_digest(tmp_path / "link")


# -- FileDigests: a digest while the file's stat facts are those it had when hashed -------------

def _hashed(record: FileDigests, path) -> str:
    """Hash ``path`` as a caller does: facts first, the bytes read, then recorded."""
    before = record.facts(path)
    digest = str(file_digest(path)[0])
    assert record.record(path, digest, before)
    return digest


def test_a_recorded_digest_is_known_while_the_file_is_unchanged_and_across_processes(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    record = FileDigests(tmp_path / "r.json")
    assert record.known(f) is None
    digest = _hashed(record, f)
    assert record.known(f) == digest == f"sha256:{HEX}"
    assert record.save()
    assert FileDigests(tmp_path / "r.json").known(f) == digest  # read back by a later process
    (key,) = json.loads((tmp_path / "r.json").read_bytes())
    st = os.lstat(f)
    assert key == f"{st.st_dev}:{st.st_ino}"


def test_a_rewrite_with_the_same_size_and_the_old_mtime_is_a_miss(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    record = FileDigests(tmp_path / "r.json")
    _hashed(record, f)
    record.save()
    st = os.stat(f)
    time.sleep(0.03)  # a later ctime even on a coarse (jiffy) clock
    with open(f, "r+b") as fh:  # the same inode, the same size, other bytes
        fh.write(b"xyz")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(f).st_size, os.stat(f).st_mtime_ns, os.stat(f).st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    assert FileDigests(tmp_path / "r.json").known(f) is None and record.known(f) is None
    g = tmp_path / "g"  # a copy in its place (another inode) with the old mtime is a miss too
    g.write_bytes(b"abc")
    os.utime(g, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.rename(g, f)
    assert record.known(f) is None


def test_a_file_changed_while_it_was_hashed_is_not_recorded(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    record = FileDigests(tmp_path / "r.json")
    before = record.facts(f)
    digest = str(file_digest(f)[0])
    time.sleep(0.03)
    f.write_bytes(b"abcd")  # written between the facts and the record
    assert not record.record(f, digest, before)
    assert record.known(f) is None and record.save() and not (tmp_path / "r.json").exists()
    assert not record.record(f, digest, None)  # no facts taken (not a regular file): nothing kept


def test_digest_of_hashes_once_and_records(tmp_path, monkeypatch):
    import lemonpack.digest

    f = tmp_path / "f"
    f.write_bytes(b"abc")
    record = FileDigests(tmp_path / "r.json")
    calls = []
    real = lemonpack.digest.file_digest
    monkeypatch.setattr(lemonpack.digest, "file_digest", lambda p: calls.append(p) or real(p))
    assert record.digest_of(f) == record.digest_of(f) == (Digest(HEX), 3) and calls == [f]


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'{"1:2": "sha256:x"}', b"\xff\xfe", b""])
def test_a_corrupt_record_is_a_miss_and_is_replaced(tmp_path, content):
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    (tmp_path / "r.json").write_bytes(content)
    record = FileDigests(tmp_path / "r.json")
    assert record.known(f) is None
    _hashed(record, f)
    assert record.save() and FileDigests(tmp_path / "r.json").known(f) == f"sha256:{HEX}"


def test_a_record_of_other_facts_or_an_older_shape_or_a_bad_digest_is_a_miss(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    facts = FileDigests.facts(f)
    assert facts is not None
    key = f"{facts[4]}:{facts[3]}"
    for entry in ([f"sha256:{HEX}", facts],  # the shape of earlier releases: never trusted
                  {"digest": f"sha256:{HEX}", "facts": [facts[0], facts[1], facts[2] - 1, facts[3], facts[4]]},
                  {"digest": "sha256:" + "0" * 63, "facts": facts}):
        (tmp_path / "r.json").write_text(json.dumps({key: entry}))
        assert FileDigests(tmp_path / "r.json").known(f) is None, entry


def test_no_facts_for_what_is_not_a_regular_file_and_an_unreadable_record_is_a_miss(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    (tmp_path / "link").symlink_to(f)
    assert FileDigests.facts(tmp_path / "link") is None and FileDigests.facts(tmp_path) is None
    assert FileDigests.facts(tmp_path / "missing") is None
    (tmp_path / "dir.json").mkdir()
    record = FileDigests(tmp_path / "dir.json")  # a directory where the record belongs
    assert record.known(f) is None
    _hashed(record, f)
    assert record.save() is False  # best effort: not written, no error


def test_the_record_is_bounded_and_forget_drops_an_entry(tmp_path):
    record = FileDigests(tmp_path / "r.json", limit=3)
    files = []
    for n in range(5):
        f = tmp_path / f"f{n}"
        f.write_bytes(b"%d" % n)
        files.append(f)
        _hashed(record, f)
    record.save()
    again = FileDigests(tmp_path / "r.json", limit=3)
    assert [again.known(f) is not None for f in files] == [False, False, True, True, True]  # the oldest dropped
    again.forget(files[4])
    assert again.known(files[4]) is None and again.save()
    assert [FileDigests(tmp_path / "r.json").known(f) is not None for f in files[2:]] == [True, True, False]
    (tmp_path / "r.json").write_bytes(b'{"x": "' + b"y" * (3 * 256 + 4096) + b'"}')  # larger than its bound
    assert FileDigests(tmp_path / "r.json", limit=3).known(files[2]) is None

