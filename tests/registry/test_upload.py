"""UploadDigest: the digest of what an upload sends covers the blob exactly once, in order,
whatever offsets a resumed or restarted session sends from (no network)."""

from __future__ import annotations

import hashlib
import os

from lemonpack.registry.upload import UPLOAD_READ, UploadDigest, FileSlice


def _blob(tmp_path, size: int):
    data = os.urandom(size)
    path = tmp_path / "blob"
    path.write_bytes(data)
    return path, data, "sha256:" + hashlib.sha256(data).hexdigest()


def _send(hasher, path, offset, length):
    sent = []
    body = FileSlice(path, offset, length, sent.append, hasher)
    assert len(body) == length
    return b"".join(body), sum(sent)


def test_in_order_chunks_hash_to_the_blob(tmp_path):
    path, data, digest = _blob(tmp_path, 2 * UPLOAD_READ + 123)
    h = UploadDigest(path, len(data))
    a, n = _send(h, path, 0, UPLOAD_READ + 7)
    b, m = _send(h, path, UPLOAD_READ + 7, len(data) - UPLOAD_READ - 7)
    assert a + b == data and n + m == len(data)
    assert h.digest() == digest


def test_a_session_resumed_later_or_restarted_earlier_still_hashes_the_blob_once(tmp_path):
    path, data, digest = _blob(tmp_path, 3000)
    h = UploadDigest(path, len(data))
    _send(h, path, 0, 1000)
    _send(h, path, 1800, 1200)  # the registry already held 1000..1799: read from disk, not sent
    assert h.digest() == digest
    h = UploadDigest(path, len(data))
    _send(h, path, 0, 2000)
    _send(h, path, 500, 2500)  # the session lost bytes: sent again from 500
    assert h.digest() == digest
    h = UploadDigest(path, len(data))
    _send(h, path, 0, 1000)
    assert h.digest() == digest  # a session that already held the tail


def test_a_blob_changed_on_disk_does_not_hash_to_its_name(tmp_path):
    path, data, digest = _blob(tmp_path, 5000)
    h = UploadDigest(path, len(data))
    _send(h, path, 0, 2500)
    with open(path, "r+b") as f:
        f.seek(4000)
        f.write(bytes([data[4000] ^ 0xFF]))
    _send(h, path, 2500, 2500)
    assert h.digest() != digest
