"""JSON paths in messages (lemonpack/jsonpath.py): dotted plain keys and globs, ``[i]`` indices,
every other key as a JSON string in brackets, so a path stays on one line and reads back."""

from __future__ import annotations

import json
import re

import pytest

from lemonpack.jsonpath import join


@pytest.mark.parametrize("parts, path", [
    ([], ""),
    (["platforms", "linux", "rocm", "args", 7], "platforms.linux.rocm.args[7]"),
    ([0, "recipe"], "[0].recipe"),
    (["platforms", "linux", "a.b", 0], 'platforms.linux["a.b"][0]'),
    (["arch", "gfx115*"], "arch.gfx115*"),                      # a glob is a plain key
    (["extensions", "dev.lemonpack.rank"], 'extensions["dev.lemonpack.rank"]'),
    (["[odd]"], '["[odd]"]'),                                   # a key that would read as an index
    (["a b"], '["a b"]'),
    (["x", ""], 'x[""]'),
])
def test_join(parts, path):
    assert join(parts) == path


def test_a_newline_or_a_quote_in_a_key_stays_escaped_on_one_line():
    path = join(["custom_options", 'line\nbreak "q"'])
    assert "\n" not in path and path == 'custom_options["line\\nbreak \\"q\\""]'
    (key,) = re.findall(r'\[(".*")\]', path)
    assert json.loads(key) == 'line\nbreak "q"'  # the bracketed key reads back as the key
