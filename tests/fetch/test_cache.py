"""The artifact store (lemonpack/fetch/cache.py) against the file system's own refusals (trial k2/k3):
entries that are not regular files are never used and are replaced on commit, store directories
that are files are replaced. Real files, real kernel errors; nothing mocked."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from lemonpack.fetch import ArtifactCache

from support.helpers import ENTRY_SHAPES, reshape_entry

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


def test_an_entry_rewritten_while_it_is_re_hashed_is_not_recorded_so_the_next_hit_hashes_it_again(
        tmp_path, monkeypatch):
    """The stat facts of a re-hash are taken before the read: an entry changed while it was being
    read (here: right after) keeps no record, and the next hit hashes the bytes now there."""
    import lemonpack.fetch.cache as cache_module

    cache, entry = _store(tmp_path)
    assert cache.digests.known(entry) == f"sha256:{HEX}"  # recorded by the writer's commit
    os.chmod(entry, 0o644)  # the facts move: the next hit re-hashes
    real = cache_module.file_digest

    def rewritten_while_read(path):
        result = real(path)
        with open(path, "r+b") as f:  # same size, other bytes, as a writer racing the read
            f.write(b"X")
        return result

    monkeypatch.setattr(cache_module, "file_digest", rewritten_while_read)
    assert cache.verified(HEX) == entry  # the bytes read were the good ones
    monkeypatch.setattr(cache_module, "file_digest", real)
    assert cache.digests.known(entry) is None
    assert ArtifactCache(cache.root).verified(HEX) is None and not entry.exists()  # hashed again: dropped
