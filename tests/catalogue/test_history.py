"""Versions with dates (lemonpack/catalogue/history.py): the carry from the previous index,
and the previous index read with each entry cut to what the carry reads. (A rebuild into the
same directory keeping each entry's history, through the CLI, is tests/catalogue/test_build.py's.)"""

from __future__ import annotations

import json


def test_history_is_carried_from_the_previous_index_and_grows_when_the_digest_changes():
    from lemonpack.catalogue.history import MAX_HISTORY, carry_history

    def index(date, **digests):
        return {"generated": date, "entries": [{"id": i, "version": f"v-{d[-1]}", "digest": d} for i, d in digests.items()]}

    first = index("2026-01-01T00:00:00Z", a="sha256:1", b="sha256:2")
    carry_history(first, None)
    assert first["entries"][0]["history"] == [{"version": "v-1", "digest": "sha256:1", "date": "2026-01-01T00:00:00Z"}]
    second = index("2026-02-01T00:00:00Z", a="sha256:1", b="sha256:3", c="sha256:4")
    carry_history(second, first)
    a, b, c = (e["history"] for e in second["entries"])
    assert a == first["entries"][0]["history"]  # unchanged digest: unchanged history
    assert [(h["digest"], h["date"][:7]) for h in b] == [("sha256:2", "2026-01"), ("sha256:3", "2026-02")]
    assert [(h["digest"], h["date"][:7]) for h in c] == [("sha256:4", "2026-02")]  # new entry
    # an index written before histories existed: its entries' digests dated by its generated date
    old = {"generated": "2025-12-01T00:00:00Z", "entries": [{"id": "a", "version": "v-0", "digest": "sha256:0"}]}
    third = index("2026-03-01T00:00:00Z", a="sha256:1")
    carry_history(third, old)
    assert [h["date"][:7] for h in third["entries"][0]["history"]] == ["2025-12", "2026-03"]
    many = {"generated": "x", "entries": [{"id": "a", "digest": "d", "history": [
        {"version": str(i), "digest": f"d{i}", "date": "y"} for i in range(MAX_HISTORY)]}]}
    carry_history(many, many)  # the same index is its own previous one: only the new digest is added
    assert len(many["entries"][0]["history"]) == MAX_HISTORY and many["entries"][0]["history"][-1]["digest"] == "d"


def test_the_previous_index_is_read_cut_to_what_the_carry_reads(tmp_path):
    from lemonpack.catalogue.history import _previous_index, carry_history

    hist = [{"version": "1", "digest": "sha256:1", "date": "2026-01-01T00:00:00Z"}]
    full = {"schema": 1, "generated": "2026-01-01T00:00:00Z", "publishers": [{"id": "p", "keys": []}], "rejected": [],
            "entries": [{"id": "recipe:a", "digest": "sha256:1", "version": "1", "history": hist,
                         "description": "x" * 1000, "source": {"type": "https", "url": "u"},
                         "platforms": [{"os": "linux", "accelerator": "cpu"}]}]}
    (tmp_path / "catalogue.json").write_text(json.dumps(full))
    prev = _previous_index(tmp_path / "catalogue.json")
    assert prev["entries"] == [{"id": "recipe:a", "digest": "sha256:1", "version": "1", "history": hist}]
    new = {"generated": "2026-02-01T00:00:00Z", "entries": [{"id": "recipe:a", "digest": "sha256:2", "version": "2"}]}
    want = {"generated": new["generated"], "entries": [dict(e) for e in new["entries"]]}
    carry_history(new, prev)
    carry_history(want, full)
    assert new == want and [h["digest"] for h in new["entries"][0]["history"]] == ["sha256:1", "sha256:2"]
    (tmp_path / "catalogue.json").write_text(json.dumps({**full, "schema": 2}))
    assert _previous_index(tmp_path / "catalogue.json") is None
