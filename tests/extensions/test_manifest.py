"""extension.json: the schema on every official manifest, and mutations each naming the file
and the JSON path of the offending field."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lemonpack.errors import ManifestError
from lemonpack.extensions.manifest import check_schema_lock, load_manifest, schema_problems
from support.extensions import REPO, manifest, write_extension

OFFICIAL = sorted(p.parent.name for p in (REPO / "catalogue" / "extensions").glob("*/extension.json"))


def test_official_set_is_the_seed_lock():
    lock = json.loads((REPO / "extensions.lock").read_text())
    assert lock == {"schema": 1, "extensions": ["deepseek_v4_flash", "embedding_gemma2", "minimax_h3", "qwen",
                                                "qwen3_asr", "qwen3_tts", "qwen38_flash_next", "qwen_image_21"]}
    assert OFFICIAL == sorted(lock["extensions"])


@pytest.mark.parametrize("name", OFFICIAL)
def test_official_manifests_load(name):
    ext = load_manifest(REPO / "catalogue" / "extensions" / name)
    assert ext.name == name and ext.providers and not ext.official
    for p in ext.providers:
        assert ext.target(p.target)  # every provider names a declared target
    for f in ext.files:
        assert (ext.path / f).is_file()


def test_seed_facts_of_the_official_set():
    flash = load_manifest(REPO / "catalogue/extensions/qwen38_flash_next")
    (p,) = flash.providers
    assert (p.id, p.keys, p.capability) == ("flash-next-q4", ("gguf:qwen4exp",), "text_generation")
    assert p.probe["architecture"] == ["qwen4exp"]
    mtp = next(o for o in flash.options if o.name == "--mtp-model")
    assert mtp.commands == ("serve", "bench", "prompt")
    ds = load_manifest(REPO / "catalogue/extensions/deepseek_v4_flash")
    spec = next(o for o in ds.options if o.contributes_to)
    assert (spec.name, spec.values) == ("--speculative", ("dspark",))


def test_schema_is_locked():
    assert check_schema_lock() == []


def _problems(tmp_path, doc):
    d = write_extension(tmp_path / "x", manifest("x")) if doc is None else tmp_path / "x"
    if doc is not None:
        write_extension(d, manifest("x"))
        (d / "extension.json").write_text(json.dumps(doc))
    with pytest.raises(ManifestError) as e:
        load_manifest(d)
    return [(p.path, p.rule) for p in e.value.problems], str(e.value)


def _mutate(change):
    doc = copy.deepcopy(manifest("x", options=[{"name": "--x-depth", "commands": ["serve"], "type": "integer",
                                                 "help": "Depth."}]))
    change(doc)
    return doc


MUTATIONS = {
    "unknown field": (lambda d: d.update(colour="red"), ("colour", "unknown-field")),
    "missing provider entry": (lambda d: d["providers"][0].pop("entry"), ("providers[0].entry", "missing-field")),
    "probe tensor type": (lambda d: d["providers"][0]["probe"].update(tensors=[{"name": "t", "types": ["Q4 K"]}]),
                          ("providers[0].probe.tensors[0].types[0]", "schema-pattern")),
    "bad key": (lambda d: d["providers"][0]["keys"].append("qwen4exp"), ("providers[0].keys[1]", "schema-pattern")),
    "no keys": (lambda d: d["providers"][0].update(keys=[]), ("providers[0].keys", "schema-minItems")),
    "bad capability": (lambda d: d["providers"][0].update(capability="chat"), ("providers[0].capability", "schema-enum")),
    "bad provider id": (lambda d: d["providers"][0].update(id="Flash_Next"), ("providers[0].id", "schema-pattern")),
    "bad option name": (lambda d: d["options"][0].update(name="-x"), ("options[0].name", "schema-pattern")),
    "bad command": (lambda d: d["options"][0].update(commands=["run"]), ("options[0].commands[0]", "schema-enum")),
    "control char in help": (lambda d: d["options"][0].update(help="a\nb"), ("options[0].help", "schema-pattern")),
    "bad requirement": (lambda d: d["targets"][0].update(requires=["rocm"]), ("targets[0].requires[0]", "schema-enum")),
    "api constraint": (lambda d: d.update(api_version="^0.1"), ("api_version", "schema-pattern")),
    "entry symbol": (lambda d: d.update(entry="x-register"), ("entry", "schema-pattern")),
    "file escapes": (lambda d: d.update(files=["../x.cpp"]), ("files[0]", "schema-pattern")),
    "probe shape": (lambda d: d["providers"][0]["probe"].update(tensors=[{"name": "t", "shape": [1.5]}]),
                    ("providers[0].probe.tensors[0].shape[0]", "schema-anyOf")),
    "probe metadata float": (lambda d: d["providers"][0]["probe"].update(metadata={"a.b": 1.5}),
                             ('providers[0].probe.metadata["a.b"]', "schema-type")),
    "unknown target": (lambda d: d["providers"][0].update(target="nope"), ("providers[0].target", "unknown-target")),
    "duplicate provider": (lambda d: d["providers"].append(dict(d["providers"][0], entry="other")),
                           ("providers[1].id", "duplicate-provider")),
    "core option": (lambda d: d["options"][0].update(name="--port"), ("options[0].name", "core-option")),
    "contribution named wrong": (lambda d: d["options"].append({"name": "--spec", "commands": ["serve"], "type": "choice",
                                                                "help": "h", "values": ["v"], "contributes_to": "--speculative"}),
                                 ("options[1].name", "contributed-option")),
    "contribution of core value": (lambda d: d["options"].append({"name": "--speculative", "commands": ["serve"],
                                                                  "type": "choice", "help": "h", "values": ["off"],
                                                                  "contributes_to": "--speculative"}),
                                   ("options[1].values[0]", "contributed-option")),
    "choice without values": (lambda d: d["options"][0].update(type="choice"), ("options[0].values", "choice-values")),
    "self dependency": (lambda d: d.update(dependencies=["x"]), ("dependencies[0]", "self-dependency")),
    "missing file": (lambda d: d.update(files=["extension.cpp", "gone.cpp"]), ("files[1]", "missing-file")),
    "keyword name": (lambda d: d.update(name="class"), ("name", "cxx-keyword")),
    "mangled clash": (lambda d: d["providers"].append(dict(d["providers"][0], id="x.p", entry="e2")),
                      ("providers[1]", "constant-clash")),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_mutation_is_rejected_naming_file_and_path(tmp_path, case):
    change, expected = MUTATIONS[case]
    problems, text = _problems(tmp_path, _mutate(change))
    assert expected in problems, problems
    assert str(tmp_path / "x" / "extension.json") in text
    assert f": {expected[0]}: " in text


def test_every_reason_is_kept(tmp_path):
    doc = _mutate(lambda d: (d.update(colour="red"), d["providers"][0]["keys"].append("bad")))
    problems, _ = _problems(tmp_path, doc)
    assert {("colour", "unknown-field"), ("providers[0].keys[1]", "schema-pattern")} <= set(problems)


def test_duplicate_json_key_and_syntax(tmp_path):
    d = write_extension(tmp_path / "x", manifest("x"))
    (d / "extension.json").write_text('{"name": "x", "name": "y"}')
    with pytest.raises(ManifestError, match="duplicate key 'name'"):
        load_manifest(d)
    (d / "extension.json").write_text('{"name": ')
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_manifest(d / "extension.json")


def test_seed_manifest_without_a_declarative_probe_is_valid(tmp_path):
    """Seed 002 section 8's simplified manifest, as written: the probe is code (provider.cpp)."""
    doc = {"name": "qwen38_flash_next", "api_version": ">= 0.1.0", "entry": "qwen38_flash_next_register",
           "providers": [{"id": "flash-next-q4", "capability": "text_generation", "keys": ["gguf:qwen4exp"],
                          "target": "gufo_qwen38_flash_next_hip", "entry": "qwen38_flash_next_provider_register"}],
           "version": "1.0.0", "targets": [{"name": "gufo_qwen38_flash_next_hip", "requires": ["hip"]}]}
    (tmp_path / "extension.json").write_text(json.dumps(doc))
    ext = load_manifest(tmp_path)
    assert ext.providers[0].probe is None and ext.providers[0].id == "flash-next-q4"


# ---------------------------------------------------------------- the fast acceptor

def _strict_ok(doc) -> bool:
    from lemonpack.extensions.manifest import _validator
    return not list(_validator().iter_errors(doc))


TRICKY = {
    "integer written as a float": lambda d: d["providers"][0]["probe"].update(tensors=[{"name": "t", "shape": [1.0]}]),
    "float metadata": lambda d: d["providers"][0]["probe"].update(metadata={"a.b": 2.0}),
    "newline before the end": lambda d: d.update(version="1.0.0\n"),
    "identical providers": lambda d: d["providers"].append(copy.deepcopy(d["providers"][0])),
    "same id, other entry": lambda d: d["providers"].append(dict(d["providers"][0], entry="other")),
    "identical targets": lambda d: d["targets"].append(copy.deepcopy(d["targets"][0])),
    "true and 1 in an enum list": lambda d: d["targets"][0].update(requires=["linux", True]),
    "boolean as integer": lambda d: d["providers"][0]["probe"].update(tensors=[{"name": "t", "shape": [True]}]),
    "no probe": lambda d: d["providers"][0].pop("probe"),
    "tensor types": lambda d: d["providers"][0]["probe"].update(tensors=[{"name": "t", "types": ["Q4_K", "Q4_K"]}]),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS) + sorted(TRICKY))
def test_fast_acceptor_agrees_with_the_strict_validator(case):
    """schema_problems accepts through a compiled fastjsonschema predicate: it must accept
    exactly what the strict jsonschema validator accepts."""
    doc = _mutate(MUTATIONS[case][0] if case in MUTATIONS else TRICKY[case])
    assert (schema_problems(doc, "f") == []) == _strict_ok(doc)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False, width=32)
                           | st.sampled_from(["", "x", "linux", "gguf:x", "Q4_K", "1.0.0", "--x", "a\n", "x_y"]),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                               st.sampled_from(["name", "id", "types", "shape", "x"]), inner, max_size=3),
                           max_leaves=6)
PLACES = [("name",), ("version",), ("providers", 0, "id"), ("providers", 0, "keys"), ("providers", 0, "probe"),
          ("providers", 0, "probe", "tensors"), ("providers", 0, "probe", "metadata"), ("options", 0),
          ("targets", 0, "requires"), ("targets",), ("files",), ("dependencies",), ("providers",), ("extra",)]


@settings(max_examples=150, deadline=None)
@given(place=st.sampled_from(PLACES), value=JSON_VALUES)
def test_fast_acceptor_agrees_on_random_values(place, value):
    doc = _mutate(lambda d: None)
    doc["providers"][0]["probe"]["tensors"] = [{"name": "t"}]
    target = doc
    for key in place[:-1]:
        target = target[key]
    target[place[-1]] = value
    assert (schema_problems(doc, "f") == []) == _strict_ok(doc)
