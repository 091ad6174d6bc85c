"""Never looser than the normative v1 JSON Schema of the Lemonade prototype
(abn/lemonade ``src/cpp/resources/schemas/external-backend.v1.schema.json``), and where
lemonpack was stricter than that schema and the RFC, the RFC's default instead.

Each test names the schema keyword or RFC section it follows.
"""

from __future__ import annotations

import copy
import json

import pytest

from support.recipes import PASSTHROUGH, VARIANT
from lemonpack.contract import load_recipe_text
from lemonpack.contract.builtins import BUILTIN_RECIPES
from lemonpack.contract.loader import check_text


def answer(doc) -> list[tuple[str, str]]:
    return [(p.path, p.rule) for p in check_text(json.dumps(doc), "r.json")[1]]


def paths(doc) -> list[str]:
    return [p for p, _ in answer(doc)]


def with_value(doc: dict, where: tuple, value) -> dict:
    doc = copy.deepcopy(doc)
    parent = doc
    for part in where[:-1]:
        parent = parent.setdefault(part, {})
    parent[where[-1]] = value
    return doc


# (document, field path, a valid value for the field, JSON path of the field): every field
# whose pattern ends in ``$`` (the engine paths' ``^/`` has no end anchor, as in the schema)
PATTERNED = [
    (PASSTHROUGH, ("recipe",), "my-engine", "recipe"),
    (PASSTHROUGH, ("extends",), "base-engine", "extends"),
    (VARIANT, ("variant_of",), "llamacpp", "variant_of"),
    (VARIANT, ("sha256",), "sha256:" + "ab" * 32, "sha256"),
    (VARIANT, ("source",), "https://example.invalid/a.tar.gz", "source"),
    (VARIANT, ("platforms", "linux", "rocm", "binary"), "llama-server", "platforms.linux.rocm.binary"),
]


@pytest.mark.parametrize(("doc", "where", "good", "path"), PATTERNED, ids=[p[3] for p in PATTERNED])
def test_pattern_anchors_at_end_of_input(doc, where, good, path):
    """JSON Schema ``pattern`` is ECMA-262: ``$`` does not accept a trailing newline."""
    assert path not in paths(with_value(doc, where, good))
    assert path in paths(with_value(doc, where, good + "\n"))


def test_custom_option_patterns_anchor_at_end_of_input():
    opt = {"name": "gpu_layers", "cli_flag": "--gpu-layers", "default_value": 0, "help": "h"}
    assert answer(with_value(PASSTHROUGH, ("custom_options",), [opt])) == []
    for field in ("name", "cli_flag"):
        bad = dict(opt, **{field: opt[field] + "\n"})
        assert f"custom_options[0].{field}" in paths(with_value(PASSTHROUGH, ("custom_options",), [bad]))


@pytest.mark.parametrize("binary", ["-x", ".hidden", "bin/llama", "..", "a\\b", "a b", "llama\n", ""])
def test_binary_is_a_bare_name(binary):
    """Schema ``exec_block.binary``: ``^[A-Za-z0-9][A-Za-z0-9._-]*$``."""
    doc = with_value(VARIANT, ("platforms", "linux", "rocm", "binary"), binary)
    assert ("platforms.linux.rocm.binary", "binary-name") in answer(doc)


@pytest.mark.parametrize("binary", ["llama-server", "llama-server.exe", "a..b", "9"])
def test_binary_bare_names_pass(binary):
    assert answer(with_value(VARIANT, ("platforms", "linux", "rocm", "binary"), binary)) == []


def test_builtin_recipe_ids_of_the_reference():
    """``LEMON_BACKENDS`` of the prototype (cmake/Backends.cmake): each id is taken."""
    reference = {"llamacpp", "whispercpp", "moonshine", "kokoro", "sd-cpp", "flm", "ryzenai-llm", "vllm",
                 "thenoise", "cloud", "thinksound", "acestep", "onnxruntime", "trellis", "openmoss"}
    assert reference <= BUILTIN_RECIPES
    for recipe in sorted(reference):
        assert ("recipe", "builtin-collision") in answer(with_value(PASSTHROUGH, ("recipe",), recipe)), recipe


@pytest.mark.parametrize(("field", "top"), [("timeout_seconds", 600), ("poll_interval_ms", 5000),
                                            ("expected_status", 599)])
def test_probe_bounds(field, top):
    """Schema ``health_probe``: timeout_seconds 1..600, poll_interval_ms 10..5000."""
    ok = with_value(PASSTHROUGH, ("health_probe",), {"type": "http", field: top})
    assert answer(ok) == []
    assert (f"health_probe.{field}", "schema-maximum") in answer(with_value(ok, ("health_probe", field), top + 1))


def test_probe_type_defaults_to_http():
    """RFC 4.3 / schema ``default: http``: a probe without ``type`` is an http probe."""
    doc = with_value(PASSTHROUGH, ("health_probe",), {"endpoint": "/ready"})
    recipe = load_recipe_text(json.dumps(doc))
    assert (recipe.health_probe.type, recipe.health_probe.endpoint) == ("http", "/ready")


@pytest.mark.parametrize("ports", [1.0, 2.0, 0, 2, -1, True, "1", None])
def test_requested_ports_is_the_integer_one(ports):
    """RFC 4.3: any value other than 1 is rejected; 1.0 is a number, not the integer 1."""
    assert "requested_ports" in paths(with_value(PASSTHROUGH, ("requested_ports",), ports))
    assert answer(with_value(PASSTHROUGH, ("requested_ports",), 1)) == []


@pytest.mark.parametrize("where", [("reserved_args",), ("platforms", "linux", "rocm", "reserved_args")])
def test_reserved_args_unique(where):
    """Schema ``reserved_args``: ``uniqueItems``."""
    assert answer(with_value(VARIANT, where, ["--port", "-m"])) == []
    got = answer(with_value(VARIANT, where, ["--port", "-m", "--port"]))
    assert (".".join(where) + "[2]", "duplicate-item") in got


def test_capabilities_unique_by_json_equality():
    got = answer(with_value(PASSTHROUGH, ("capabilities",), ["chat_completion", "completion", "chat_completion"]))
    assert got == [("capabilities[2]", "duplicate-item")]


@pytest.mark.parametrize("version", ["01", "0", "1\n", "²", "١", "1.0", " 1", ""])
def test_api_contract_version_malformed(version):
    """Schema: ``const: "1"``; ours reports a newer well-formed major separately."""
    assert ("api_contract_version", "schema-pattern") in answer(with_value(PASSTHROUGH, ("api_contract_version",), version))


@pytest.mark.parametrize("version", ["2", "10", "9" * 5000])
def test_api_contract_version_newer(version):
    got = answer(with_value(PASSTHROUGH, ("api_contract_version",), version))
    assert got == [("api_contract_version", "contract-too-new")]


def test_pinned_variant_without_any_source_needs_sha256():
    """Schema ``allOf``: a variant_of not roll_forward requires sha256 (RFC 7: pinned
    requires sha256, a variant_of without source runs the user's binary)."""
    doc = copy.deepcopy(VARIANT)
    del doc["source"], doc["sha256"]
    assert answer(doc) == [("platforms.linux.rocm", "pinned-needs-sha256")]
    assert answer(with_value(doc, ("sha256",), "sha256:" + "cd" * 32)) == []
    assert answer(with_value(doc, ("version_policy",), "roll_forward")) == []


def test_arch_override_names_only_its_deltas():
    """RFC 4.6: an override's stop_command_args uses the base block's stop_command."""
    block = {"command": "/opt/e", "args": ["{port}"], "stop_command": "kill", "stop_command_args": ["{pid}"],
             "arch": {"gfx1151": {"stop_command_args": ["-9", "{pid}"]}}}
    doc = with_value(PASSTHROUGH, ("platforms", "linux", "cpu"), block)
    assert answer(doc) == []
    del block["stop_command"], block["stop_command_args"]
    assert answer(with_value(PASSTHROUGH, ("platforms", "linux", "cpu"), block)) == [
        ("platforms.linux.cpu.arch.gfx1151.stop_command_args", "stop-command-args")]


@pytest.mark.parametrize("value", ["amd/strix-halo", "strix halo", "gfx1151\n"])
def test_arch_alias_values_are_any_non_empty_string(value):
    """The normative schema: arch_aliases values are strings of minLength 1 (RFC 4.6: "a name,
    tag, or path that varies by arch is written once"); an empty one is refused."""
    assert "arch_aliases.gfx1151" not in paths(with_value(PASSTHROUGH, ("arch_aliases", "gfx1151"), value))
    assert "arch_aliases.gfx1151" in paths(with_value(PASSTHROUGH, ("arch_aliases", "gfx1151"), ""))
