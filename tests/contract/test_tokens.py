"""Token engine, schema lock, host detection on a fake root."""

import json
import shutil

import pytest

from lemonpack.contract import tokens
from lemonpack.contract.host import HostFacts, detect_host
from lemonpack.contract.schemalock import SCHEMA_DIR, check_lock, refresh_lock
from lemonpack.errors import LemonpackError, TokenError


def test_render_resolves_each_token_into_one_element():
    values = {"recipe": "r", "port": "8080"}
    out = tokens.render("lemonade-{recipe}-{port}", lambda t: values[t.kind])
    assert out == "lemonade-r-8080"


@pytest.mark.parametrize("value, ok", [("-12", True), ("-0", True), ("-1.5", True), ("--rm", False),
                                       ("-m", False), ("-1e5", False), ("- 1", False)])
def test_leading_dash_rule(value, ok):
    if ok:
        assert tokens.render("{model_name}", lambda t: value) == value
    else:
        with pytest.raises(TokenError, match="begins with '-'"):
            tokens.render("{model_name}", lambda t: value)


def test_render_argv_expands_custom_args_only_as_whole_element():
    argv = tokens.render_argv(["-m", "{custom_args}", "--port={port}"], lambda t: "9",
                              lambda: ["--a", "b"])
    assert argv == ["-m", "--a", "b", "--port=9"]
    with pytest.raises(TokenError):
        tokens.render("x{custom_args}", lambda t: "")


def test_token_defaults_parsed():
    [t] = tokens.tokens_in("{custom:vk_device:-0}")
    assert (t.kind, t.name, t.default) == ("custom", "vk_device", "0")
    [t] = tokens.tokens_in("{env:HF_HOME}")
    assert t.default is None


def copy_schema(tmp_path):
    d = tmp_path / "schema"
    shutil.copytree(SCHEMA_DIR, d)
    return d


def test_shipped_schema_matches_lock():
    assert check_lock() == []


def test_schema_change_without_lock_refresh_fails(tmp_path):
    d = copy_schema(tmp_path)
    p = d / "recipe-v1.schema.json"
    doc = json.loads(p.read_text())
    doc["properties"]["new_field"] = {"type": "string"}
    p.write_text(json.dumps(doc))
    [problem] = check_lock(d)
    assert "major 1" in problem and "scripts/locks.py recipe-schema" in problem
    before = json.loads((d / "lock.json").read_text())["majors"]["1"]
    with pytest.raises(LemonpackError, match="--reason"):
        refresh_lock(d)  # a correction is never silent
    assert check_lock(d) == [problem]
    refresh_lock(d, reason="add new_field")
    assert check_lock(d) == []
    entry = json.loads((d / "lock.json").read_text())["majors"]["1"]
    assert entry["history"][-1] == {"sha256": before["sha256"], "reason": "add new_field"}
    assert entry["history"][:-1] == before.get("history", [])


def test_whitespace_only_edit_keeps_lock(tmp_path):
    d = copy_schema(tmp_path)
    p = d / "recipe-v1.schema.json"
    p.write_text(json.dumps(json.loads(p.read_text()), indent=8))
    assert check_lock(d) == []


def test_released_major_is_frozen(tmp_path):
    d = copy_schema(tmp_path)
    lock = json.loads((d / "lock.json").read_text())
    lock["majors"]["1"]["released"] = True
    (d / "lock.json").write_text(json.dumps(lock))
    p = d / "recipe-v1.schema.json"
    doc = json.loads(p.read_text())
    doc["title"] = "edited"
    p.write_text(json.dumps(doc))
    assert "released and frozen" in check_lock(d)[0]
    with pytest.raises(LemonpackError, match="frozen"):
        refresh_lock(d)


def test_detect_host_on_this_machine_and_injected(monkeypatch):
    monkeypatch.delenv("LEMONPACK_HOST_FACTS", raising=False)
    facts = detect_host()
    assert facts.os == "linux" and "cpu" in facts.accelerators and facts == detect_host("/")
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", json.dumps({"os": "linux", "accelerators": ["rocm"],
                                                           "rocm_arch": "gfx1151"}))
    assert detect_host() == HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx1151")


def test_platform_key_constants_match_the_schema():
    from lemonpack.contract.builtins import ACCELERATORS, OS_NAMES
    from lemonpack.contract.schemalock import load_schema

    schema = load_schema(1)
    assert tuple(schema["properties"]["platforms"]["propertyNames"]["enum"]) == OS_NAMES
    assert tuple(schema["$defs"]["accelerator"]["enum"]) == ACCELERATORS


@pytest.mark.parametrize("facts, needle", [
    ('{"os": "linux", "accelerators": "rocm"}', "'accelerators' must be a list"),
    ('{"os": "plan9"}', "'os' must be one of linux, darwin, windows"),
    ('{"os": "linux", "gpu": "x"}', "unknown key 'gpu'"),
    ('{"os": "linux", "accelerators": ["quantum"]}', "unknown accelerator 'quantum'"),
    ('{"os": "linux", "rocm_arch": 1151}', "'rocm_arch' must be a string"),
    ('[]', "not a JSON object"),
])
def test_injected_host_facts_are_validated(monkeypatch, facts, needle):
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", facts)
    with pytest.raises(LemonpackError, match="LEMONPACK_HOST_FACTS") as e:
        detect_host()
    assert needle in str(e.value)
