"""The one canonical JSON encoder (lemonpack/canonical.py): sorted keys, compact separators, UTF-8,
no trailing newline, floats refused."""

import pytest

from lemonpack.canonical import canonical_json


def test_canonical_json_sorted_compact_utf8():
    assert canonical_json({"b": 1, "a": [True, None, "é"]}) == '{"a":[true,null,"é"],"b":1}'.encode()


def test_canonical_json_no_trailing_newline_and_nested_sort():
    out = canonical_json({"z": {"y": 1, "x": 2}})
    assert out == b'{"z":{"x":2,"y":1}}'


def test_canonical_json_refuses_floats():
    with pytest.raises(TypeError):
        canonical_json({"a": 1.5})


