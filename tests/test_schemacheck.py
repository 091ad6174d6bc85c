"""The one JSON Schema check (lemonpack/schemacheck.py): its documented narrowings and the
normative schema's pairing (integers written as integers, the exec_block pairing), every problem
of a huge input reported (the time bound here is only a hang guard; bench/lint.py measures), and
``inline_local_refs`` (the validator sees the same schema without $ref lookups)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import jsonschema
import pytest

from lemonpack.cli import main
from lemonpack.contract.loader import check_text
from lemonpack.contract.schemalock import load_schema
from lemonpack.schemacheck import inline_local_refs, strict_validator
from support.recipes import PASSTHROUGH, VARIANT

INTEGER_FIELDS = [("requested_ports",), ("health_probe", "expected_status"),
                  ("health_probe", "timeout_seconds"), ("health_probe", "poll_interval_ms")]
ROOT = Path(__file__).resolve().parents[1]
GOOD = {"requested_ports": "1", "expected_status": "200", "timeout_seconds": "60", "poll_interval_ms": "200"}


@pytest.mark.parametrize("where", INTEGER_FIELDS, ids=[".".join(w) for w in INTEGER_FIELDS])
@pytest.mark.parametrize("suffix", [".0", "e0", "E0", ".00e0"])
def test_integer_fields_refuse_a_fraction_or_exponent(where, suffix):
    """One policy for every integer field: 1.0 and 1e0 are floats to Python's and Go's parsers."""
    good = GOOD[where[-1]]
    doc = json.loads(json.dumps(PASSTHROUGH))
    if len(where) == 2:
        doc["health_probe"] = {"type": "http"}
    text = json.dumps(doc)
    target = text[:-1] + f', "requested_ports": {good}{suffix}}}'
    if len(where) == 2:
        target = text.replace('{"type": "http"}', f'{{"type": "http", "{where[1]}": {good}{suffix}}}')
        clean = text.replace('{"type": "http"}', f'{{"type": "http", "{where[1]}": {good}}}')
    else:
        clean = text[:-1] + f', "requested_ports": {good}}}'
    assert check_text(clean, "r.json")[1] == []
    problems = check_text(target, "r.json")[1]
    assert [(p.path, p.rule) for p in problems] == [(".".join(where), "integer")]
    assert f"write {good}" in problems[0].message


def test_requested_ports_float_one_cites_rfc():
    [p] = check_text(json.dumps(PASSTHROUGH)[:-1] + ', "requested_ports": 1.0}', "r.json")[1]
    assert p.rule == "integer" and "RFC 4.3" in p.message


def _rules(doc) -> list[tuple[str, str]]:
    return [(p.path, p.rule) for p in check_text(json.dumps(doc), "r.json")[1]]


def test_binary_with_command_is_not_a_pairing_problem():
    """Normative exec_block: anyOf [command+args, binary]; with binary, command alone is not
    a pairing fault (a variant_of block's command is refused as variant-of-command)."""
    doc = json.loads(json.dumps(VARIANT))
    doc["platforms"]["linux"]["rocm"]["command"] = "llama-server"
    assert _rules(doc) == [("platforms.linux.rocm.command", "variant-of-command")]


@pytest.mark.parametrize("field", ["command", "args"])
def test_passthrough_block_without_binary_needs_command_and_args(field):
    doc = json.loads(json.dumps(PASSTHROUGH))
    del doc["platforms"]["linux"]["cpu"]["args" if field == "command" else "command"]
    assert (f"platforms.linux.cpu.{field}", "command-and-args") in _rules(doc)


def _hostile(kind: str) -> str:
    text = json.dumps(PASSTHROUGH)
    if kind == "caps":
        return text.replace('["chat_completion", "completion"]', "[" + ",".join(['"chat_completion"'] * 50000) + "]")
    overrides = ",".join(f'"x{i}":{{"bogus":1}}' for i in range(20000))
    return text.replace('"args": ["--port", "{port}"]', '"args": [], "arch": {' + overrides + "}")


@pytest.mark.parametrize(("kind", "more", "rule"), [("caps", "and at least ", "duplicate-item"),
                                                    ("arch", "and at least 1800 more problems", "unknown-field")])
def test_a_huge_input_gets_a_bounded_report_in_document_order(capsys, tmp_path, kind, more, rule):
    """At most MAX_PROBLEMS problems, the first in document order, then one line counting the
    rest ("at least" when the schema check stopped after MAX_SCHEMA_ERRORS errors)."""
    from lemonpack.schemacheck import MAX_PROBLEMS

    path = tmp_path / "r.json"
    path.write_text(_hostile(kind))
    start = time.monotonic()
    code = main(["lint", str(path)])
    out = capsys.readouterr().out.splitlines()
    assert time.monotonic() - start < 20, "hang guard"
    assert code == 1 and len(out) == MAX_PROBLEMS + 1
    assert all(line.endswith(f"[{rule}]") for line in out[:-1])
    assert more in out[-1] and out[-1].endswith("[more-problems]")
    if kind == "arch":  # document order: x0, x1, ... x199
        assert [line.split("arch.x", 1)[1].split(".", 1)[0] for line in out[:-1]] == [str(i) for i in range(200)]
    assert main(["lint", "--json", str(path), str(path)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [len(f["problems"]) for f in doc["files"]] == [MAX_PROBLEMS + 1] * 2 and doc["ok"] is False


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


#: Every JSON Schema shipped in the package: the validators built from them skip the
#: metaschema check at run time (``strict_validator(..., shipped=True)``), so it is made here.
SHIPPED_SCHEMAS = sorted(p.relative_to(ROOT) for p in (ROOT / "lemonpack").rglob("*.schema.json")
                         if "tree" not in p.relative_to(ROOT / "lemonpack").parts)


@pytest.mark.parametrize("path", SHIPPED_SCHEMAS, ids=str)
def test_every_shipped_schema_passes_its_metaschema(path):
    schema = json.loads((ROOT / path).read_text(encoding="utf-8"))
    jsonschema.validators.validator_for(schema).check_schema(schema)


def test_the_shipped_schemas_are_the_ones_the_validators_load():
    names = {p.name for p in SHIPPED_SCHEMAS}
    assert {"recipe-v1.schema.json", "extension-v1.schema.json"} <= names, names


def test_a_schema_not_shipped_is_still_checked_against_its_metaschema():
    bad = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "objekt"}
    with pytest.raises(jsonschema.SchemaError):
        strict_validator(bad)
    strict_validator(bad, shipped=True)  # a shipped schema is trusted: the test above checked it
