"""The build's output files (lemonpack/catalogue/output.py): the index spliced from its
entries' canonical JSON. (Warm builds linking the previous output, byte for byte the same as
--fresh, are tests/catalogue/test_build.py's, through the CLI.)"""

from __future__ import annotations

import pytest


def test_the_index_spliced_from_its_entries_is_its_canonical_json_and_refuses_floats():
    """The warm build's index bytes (each entry encoded once, spliced) are canonical_json's,
    text that only looks like a float passes, a float anywhere is refused as canonical_json does."""
    from lemonpack.canonical import canonical_json
    from lemonpack.catalogue.output import _entry_json, _index_json

    entries = [{"id": "recipe:a", "description": "ratio:1.5, [2e5]", "n": [1, -2, {"x": None}]},
               {"id": "recipe:b", "tags": ["1.0", "é"], "ok": True}]
    index = {"schema": 1, "generated": "1970-01-01T00:00:00Z", "publishers": [{"id": "p"}], "entries": entries,
             "rejected": []}
    assert _index_json(index, [_entry_json(e) for e in entries]) == canonical_json(index)
    for bad in ({"x": 0.5}, {"x": [1e-07]}, {"x": {"y": -0.0}}):
        broken = dict(index, entries=[*entries, {"id": "recipe:c", **bad}])
        with pytest.raises(TypeError, match="floats are not allowed"):
            _index_json(broken, [_entry_json(e) for e in broken["entries"]])
