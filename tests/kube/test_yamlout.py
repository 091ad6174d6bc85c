"""The YAML writer of ``kube generate``, with PyYAML as the oracle: whatever it writes reads back
as the same data, for arbitrary JSON-shaped documents and strings."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from lemonpack.kube.yamlout import dump_all, scalar

scalars = st.none() | st.booleans() | st.integers(min_value=-(2 ** 63), max_value=2 ** 63) | st.text(max_size=40)
json_data = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                         | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=12), json_data, max_size=5), max_size=3))
def test_round_trips_through_pyyaml(docs):
    assert list(yaml.safe_load_all(dump_all(docs))) == docs


def test_strings_that_look_like_other_things_are_quoted():
    for text in ("yes", "No", "on", "OFF", "true", "null", "~", "", "1", "0x1f", "1e3", "1:20", "2001-12-14", ".inf",
                 "-m", "- x", "a: b", "#x", "*alias", "&a", "!tag", "%x", "@x", "`x", "'q'", '"q"', "a #b", " x", "x ",
                 "line\nbreak", "A\n", "x\n", "tab\t", "\x85", "\u2028", "\ufeff", "é", "0.0.0.0", "{custom}", "[x]", "?", "|", ">"):
        assert yaml.safe_load(f"k: {scalar(text)}") == {"k": text}, text
    for text in ("llama-server", "/opt/lemonpack/x/llama-server", "nvidia.com/gpu", "app.kubernetes.io/name", "_x"):
        assert scalar(text) == text  # plain where nothing else can be read
