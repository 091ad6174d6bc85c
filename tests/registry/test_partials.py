"""A killed pull's leftovers (lemonpack/registry/partials.py): stale ``OUT.tmp-*`` directories
go, a locked (live) one stays, the cache's records are swept with them. The end to end test (a
real pull killed mid-blob, then ``cache clean --partial``) is in
tests/scenarios/test_registry_logins_and_repull.py."""

from __future__ import annotations

import os

from lemonpack.files import locked
from lemonpack.registry.partials import DirLock, partial_pulls_dir, remove_leftovers, sweep_partial_pulls


def test_stale_staging_directories_go_live_ones_stay(tmp_path, monkeypatch):
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "pulled"
    stale, live, other = (tmp_path / n for n in ("pulled.tmp-aaa", "pulled.tmp-bbb", "pulledx.tmp-ccc"))
    for d in (stale, live, other):
        (d / "blobs").mkdir(parents=True)
    with DirLock() as hold:
        hold.lock(live)
        hold.record(live)
        notes = list(partial_pulls_dir().glob("*.path"))
        assert len(notes) == 1 and notes[0].read_text() == str(live.resolve())
        assert remove_leftovers(out) == [stale]
        assert live.is_dir() and other.is_dir()  # live: locked; other: another output's
        assert sweep_partial_pulls() == []  # the recorded one is running
    assert not list(partial_pulls_dir().glob("*.path"))  # the record goes with the block


def test_cache_clean_sweeps_what_a_killed_pull_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    staged = tmp_path / "out.tmp-123"
    (staged / "blobs" / "sha256").mkdir(parents=True)
    (staged / "blobs" / "sha256" / "x").write_bytes(b"12345")
    records = partial_pulls_dir()
    records.mkdir(parents=True)
    (records / "out.tmp-123-99999.path").write_text(str(staged))  # the process that wrote it died
    (records / "junk.path").write_text("/etc")  # not a staging directory: the record goes, /etc stays
    with locked(tmp_path):  # a lock on something else does not count
        removed = sweep_partial_pulls()
    assert [(p, n) for p, n in removed] == [(staged, 5)]
    assert not staged.exists() and not list(records.iterdir()) and os.path.isdir("/etc")
