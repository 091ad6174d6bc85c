"""inline_local_refs: the validator sees the same schema without $ref lookups."""

from __future__ import annotations

import jsonschema

from lemonpack.contract.schemalock import load_schema
from lemonpack.schemacheck import inline_local_refs, strict_validator


def test_plain_refs_are_replaced_siblings_kept_cycles_left():
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "$defs": {"port": {"type": "integer", "minimum": 1},
                        "node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
              "type": "object",
              "properties": {"a": {"$ref": "#/$defs/port"},
                             "b": {"$ref": "#/$defs/port", "maximum": 9},
                             "c": {"$ref": "#/$defs/node"}}}
    out = inline_local_refs(schema)
    assert out["properties"]["a"] == {"type": "integer", "minimum": 1}
    assert out["properties"]["b"] == {"maximum": 9, "allOf": [{"type": "integer", "minimum": 1}]}
    assert out["properties"]["c"]["properties"]["next"] == {"$ref": "#/$defs/node"}  # the cycle stays a $ref
    assert schema["properties"]["a"] == {"$ref": "#/$defs/port"}  # the input is not modified
    v = strict_validator(schema)
    for doc, ok in (({"a": 3, "b": 5, "c": {"next": {"next": {}}}}, True), ({"a": 0}, False), ({"b": 10}, False),
                    ({"c": {"next": {"next": 1}}}, False)):
        assert v.is_valid(doc) is ok, doc
        assert jsonschema.Draft202012Validator(schema).is_valid(doc) is ok, doc


def test_the_shipped_recipe_schema_has_no_ref_left():
    seen = []

    def walk(n, under_defs=False):
        if isinstance(n, dict):
            for k, v in n.items():
                if k == "$ref" and not under_defs:
                    seen.append(v)
                walk(v, under_defs or k == "$defs")
        elif isinstance(n, list):
            for v in n:
                walk(v, under_defs)
    walk(inline_local_refs(load_schema(1)))
    assert seen == []
