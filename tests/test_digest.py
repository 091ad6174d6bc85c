"""``lemonpack.digest``: the text forms of a sha256 digest and the one hashing sink."""

from __future__ import annotations

import hashlib
import io
import os
import threading

import pytest

from lemonpack.digest import Digest, Hasher, HashingReader, file_digest, hex_of, names_sha256, sha256_text

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
