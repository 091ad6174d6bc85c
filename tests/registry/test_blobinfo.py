"""Where blobs were seen (lemonpack/registry/blobinfo.py): recorded per registry host, the most
recent repository first, bounded, merged with what another run wrote, a broken file ignored."""

from __future__ import annotations

import json

from lemonpack.registry import blobinfo
from lemonpack.registry.blobinfo import BlobLocations

D = "sha256:" + "a" * 64


def test_locations_are_recorded_per_host_newest_first_and_merged(tmp_path):
    path = tmp_path / "loc.json"
    one = BlobLocations("r.example", path)
    one.record(D, "team/a")
    one.record(D, "team/b")
    other = BlobLocations("r.example", path)  # another run, started before the first saved
    other.record(D, "team/c")
    one.save()
    other.save()
    again = BlobLocations("r.example", path)
    assert again.candidates(D, "team/x") == ["team/c", "team/b", "team/a"]
    assert again.candidates(D, "team/b") == ["team/c", "team/a"]  # never the repository itself
    assert BlobLocations("s.example", path).candidates(D, "team/x") == []  # another registry knows nothing


def test_the_record_is_bounded_and_a_broken_file_is_ignored(tmp_path, monkeypatch):
    path = tmp_path / "loc.json"
    monkeypatch.setattr(blobinfo, "MAX_BLOBS", 2)
    loc = BlobLocations("r.example", path)
    for n in range(blobinfo.MAX_REPOS + 3):
        loc.record(D, f"repo{n}")
    for d in ("sha256:" + "b" * 64, "sha256:" + "c" * 64):
        loc.record(d, "x")
    loc.save()
    doc = json.loads(path.read_text())["r.example"]
    assert len(doc) == 2 and D not in doc  # the oldest blob dropped
    path.write_text("{not json")
    assert BlobLocations("r.example", path).candidates(D, "y") == []
    broken = BlobLocations("r.example", path)
    broken.record(D, "z")
    broken.save()  # replaces the broken file
    assert BlobLocations("r.example", path).candidates(D, "y") == ["z"]
