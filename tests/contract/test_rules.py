"""Every rule of contract major 1, each with the JSON path and rule id a user sees."""

import dataclasses
import json
from pathlib import Path

import pytest

from lemonpack.contract import lint_file, load_recipe, load_recipe_text
from lemonpack.contract.builtins import BUILTIN_RECIPES
from lemonpack.errors import ManifestError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def write(tmp_path: Path, doc, name="recipe.json") -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def problems(tmp_path, doc):
    return [(p.path, p.rule) for p in lint_file(write(tmp_path, doc))]


def test_minimal_passthrough_and_variant_are_valid(tmp_path, passthrough, variant):
    assert problems(tmp_path, passthrough) == []
    assert problems(tmp_path, variant) == []


@pytest.mark.parametrize("field", ["recipe", "display_name", "api_contract_version", "capabilities", "platforms"])
def test_missing_required_field(tmp_path, passthrough, field):
    del passthrough[field]
    assert (field, "missing-field") in problems(tmp_path, passthrough)


@pytest.mark.parametrize("where", [(), ("platforms", "linux", "cpu"), ("health_probe",)])
def test_unknown_field_at_any_level(tmp_path, passthrough, where):
    passthrough["health_probe"] = {"type": "http"}
    obj = passthrough
    for key in where:
        obj = obj[key]
    obj["surprise"] = 1
    path = ".".join(where + ("surprise",))
    assert (path, "unknown-field") in problems(tmp_path, passthrough)


def test_unknown_field_in_arch_override(tmp_path, variant):
    variant["platforms"]["linux"]["rocm"]["arch"] = {"gfx1151": {"argv_extra": ["-x"], "oops": True}}
    assert ("platforms.linux.rocm.arch.gfx1151.oops", "unknown-field") in problems(tmp_path, variant)


def test_open_bags_accept_anything(tmp_path, passthrough):
    passthrough["recipe_options"] = {"anything": {"nested": [1, 2.5]}}
    passthrough["extensions"] = {"x-future": True}
    assert problems(tmp_path, passthrough) == []


def test_unknown_capability_everywhere(tmp_path, passthrough):
    passthrough["capabilities"].append("telepathy")
    passthrough["capability_enable_args"] = {"mindreading": ["--x"]}
    passthrough["endpoints"] = {"clairvoyance": "/v1/x"}
    got = problems(tmp_path, passthrough)
    assert ("capabilities[2]", "unknown-capability") in got
    assert ("capability_enable_args.mindreading", "unknown-capability") in got
    assert ("endpoints.clairvoyance", "unknown-capability") in got


def test_enable_args_and_endpoints_keys_must_be_declared(tmp_path, passthrough):
    passthrough["capability_enable_args"] = {"embeddings": ["--embeddings"]}
    passthrough["endpoints"] = {"reranking": "/rerank"}
    got = problems(tmp_path, passthrough)
    assert ("capability_enable_args.embeddings", "undeclared-capability") in got
    assert ("endpoints.reranking", "undeclared-capability") in got


def test_newer_contract_major_rejected(tmp_path, passthrough):
    passthrough["api_contract_version"] = "2"
    [msg] = [p.message for p in lint_file(write(tmp_path, passthrough)) if p.rule == "contract-too-new"]
    assert "newer" in msg and "(1)" in msg


def test_unknown_token_rejected(tmp_path, passthrough):
    passthrough["platforms"]["linux"]["cpu"]["args"] = ["--x", "{gpu_count}"]
    assert ("platforms.linux.cpu.args[1]", "token") in problems(tmp_path, passthrough)


@pytest.mark.parametrize("bad, needle", [
    ("{}", "empty"), ("{port", "unterminated"), ("{custom:{port}}", "nested"),
    ("{port:-8080}", "no default"), ("{checkpoint:main:-x}", "no default"), ("{custom:x\n}", "invalid name"),
    ("{custom}", "needs a name"), ("{env:BAD.NAME}", "invalid name"),
])
def test_token_syntax(tmp_path, passthrough, bad, needle):
    block = passthrough["platforms"]["linux"]["cpu"]
    block["args"] = ["-a", bad]
    block["env"] = {"X": bad}
    block["stop_command"] = "kill"
    block["stop_command_args"] = [bad]
    ps = lint_file(write(tmp_path, passthrough))
    paths = {p.path for p in ps if p.rule == "token" and needle in p.message}
    assert paths == {"platforms.linux.cpu.args[1]", "platforms.linux.cpu.env.X",
                     "platforms.linux.cpu.stop_command_args[0]"}


def test_tokens_in_command_stop_command_and_argv_extra(tmp_path, variant, passthrough):
    passthrough["platforms"]["linux"]["cpu"]["command"] = "{nope}"
    passthrough["platforms"]["linux"]["cpu"]["stop_command"] = "{nope}"
    got = problems(tmp_path, passthrough)
    assert ("platforms.linux.cpu.command", "token") in got
    assert ("platforms.linux.cpu.stop_command", "token") in got
    variant["platforms"]["linux"]["rocm"]["argv_extra"] = ["{nope}"]
    assert ("platforms.linux.rocm.argv_extra[0]", "token") in problems(tmp_path, variant)


def test_valid_tokens_of_every_group(tmp_path, passthrough):
    passthrough["platforms"]["linux"]["cpu"]["args"] = [
        "{port}", "{host}", "{log_level}", "{recipe}", "{model_name}", "{checkpoint:main}",
        "{checkpoint_relative:mmproj}", "{resolved_path}", "{model_relative_path}", "{model_dir}", "{exe_dir}",
        "{hf_cache}", "{cache_dir}", "{rocm_arch}", "{cuda_arch}", "{target_device}", "{hip_visible_devices}",
        "{cuda_visible_devices}", "{rocr_visible_devices}", "{ggml_vk_visible_devices}", "{ze_affinity_mask}",
        "{ctx_size}", "{batch_size}", "{ubatch_size}", "{threads}", "{cache_type_k}", "{cache_type_v}",
        "{custom:x}", "{custom:x:-0}", "{custom_args}", "{env:HF_HOME}", "{env:HF_HOME:-/tmp}", "a{port}b"]
    assert problems(tmp_path, passthrough) == []


def test_custom_args_must_be_a_whole_element(tmp_path, passthrough):
    passthrough["platforms"]["linux"]["cpu"]["args"] = ["--x={custom_args}"]
    passthrough["platforms"]["linux"]["cpu"]["env"] = {"A": "{custom_args}"}
    got = problems(tmp_path, passthrough)
    assert ("platforms.linux.cpu.args[0]", "token-custom-args") in got
    assert ("platforms.linux.cpu.env.A", "token-custom-args") in got


def test_pid_only_in_stop_command(tmp_path, passthrough):
    block = passthrough["platforms"]["linux"]["cpu"]
    block["args"] = ["{pid}"]
    block["stop_command"] = "kill"
    block["stop_command_args"] = ["-TERM", "{pid}"]
    assert problems(tmp_path, passthrough) == [("platforms.linux.cpu.args[0]", "token-pid")]


def test_extends_and_variant_of_exclusive(tmp_path, variant):
    variant["extends"] = "base-recipe"
    assert ("extends", "extends-and-variant-of") in problems(tmp_path, variant)


def test_variant_of_pinned_without_sha256(tmp_path, variant):
    del variant["sha256"]
    assert ("platforms.linux.rocm", "pinned-needs-sha256") in problems(tmp_path, variant)
    variant["version_policy"] = "roll_forward"
    assert problems(tmp_path, variant) == []


def test_provenance_per_block_and_per_arch(tmp_path, variant):
    del variant["source"], variant["sha256"]
    block = variant["platforms"]["linux"]["rocm"]
    block["arch"] = {"gfx1151": {"source": "https://example.invalid/a.tar.gz"},
                     "gfx115*": {"source": "https://example.invalid/b.tar.gz", "sha256": "sha256:" + "cd" * 32}}
    assert problems(tmp_path, variant) == [("platforms.linux.rocm.arch.gfx1151", "pinned-needs-sha256")]
    block["arch"]["gfx1151"]["version_policy"] = "roll_forward"
    assert problems(tmp_path, variant) == []


def test_a_source_override_may_not_inherit_a_hash_of_another_file(tmp_path, variant):
    # The top-level sha256 pins the top-level source: a block or override that swaps the
    # source needs its own hash (a user found builds verifying against the wrong file).
    variant["platforms"]["linux"]["rocm"]["source"] = "https://example.invalid/other.tar.gz"
    variant["platforms"]["linux"]["rocm"]["arch"] = {"gfx1151": {"source": "https://example.invalid/c.tar.gz"}}
    got = problems(tmp_path, variant)
    assert ("platforms.linux.rocm", "sha256-level") in got
    assert ("platforms.linux.rocm.arch.gfx1151", "sha256-level") in got
    # a hash at the same level as its source is right
    variant["platforms"]["linux"]["rocm"]["sha256"] = "sha256:" + "ef" * 32
    variant["platforms"]["linux"]["rocm"]["arch"] = {"gfx1151": {"source": "https://example.invalid/c.tar.gz",
                                                                 "sha256": "sha256:" + "12" * 32}}
    assert problems(tmp_path, variant) == []


def test_sha256_format(tmp_path, variant):
    variant["sha256"] = "sha256:ABC"
    assert ("sha256", "sha256-format") in problems(tmp_path, variant)


@pytest.mark.parametrize("rid, ok", [("ab", True), ("a", False), ("My-Engine", False), ("-x1", False),
                                     ("a" * 64, True), ("a" * 65, False), ("x_y-z9", True)])
def test_recipe_id_pattern(tmp_path, passthrough, rid, ok):
    passthrough["recipe"] = rid
    assert (("recipe", "recipe-id") not in problems(tmp_path, passthrough)) is ok


@pytest.mark.parametrize("builtin", sorted(BUILTIN_RECIPES))
def test_builtin_collision(tmp_path, passthrough, builtin):
    passthrough["recipe"] = builtin
    assert ("recipe", "builtin-collision") in problems(tmp_path, passthrough)


@pytest.mark.parametrize("ports", [0, 2, 8])
def test_requested_ports_only_one(tmp_path, passthrough, ports):
    passthrough["requested_ports"] = ports
    assert ("requested_ports", "requested-ports") in problems(tmp_path, passthrough)
    passthrough["requested_ports"] = 1
    assert problems(tmp_path, passthrough) == []


def test_streaming_transcription_needs_variant_of(tmp_path, passthrough, variant):
    passthrough["capabilities"] = ["streaming_transcription"]
    assert ("capabilities[0]", "variant-of-only-capability") in problems(tmp_path, passthrough)
    variant["capabilities"] = ["streaming_transcription"]
    variant["variant_of"] = "whispercpp"
    assert problems(tmp_path, variant) == []


@pytest.mark.parametrize("target", ["vllm", "my-fork", "kokoro"])
def test_variant_of_names_the_three(tmp_path, variant, target):
    variant["variant_of"] = target
    [p] = [p for p in lint_file(write(tmp_path, variant)) if p.rule == "variant-of-target"]
    assert p.path == "variant_of"
    for name in ("llamacpp", "whispercpp", "sd-cpp"):
        assert name in p.message


def test_command_and_args_only_together(tmp_path, passthrough):
    del passthrough["platforms"]["linux"]["cpu"]["args"]
    assert ("platforms.linux.cpu.command", "command-and-args") in problems(tmp_path, passthrough)
    passthrough["platforms"]["linux"]["cpu"] = {"args": []}
    assert ("platforms.linux.cpu.args", "command-and-args") in problems(tmp_path, passthrough)
    # an arch override names only its deltas: args alone is fine there
    passthrough["platforms"]["linux"]["cpu"] = {"command": "x", "args": [], "arch": {"gfx1151": {"args": ["-v"]}}}
    assert problems(tmp_path, passthrough) == []


def test_variant_block_needs_bare_binary(tmp_path, variant):
    del variant["platforms"]["linux"]["rocm"]["binary"]
    assert ("platforms.linux.rocm", "variant-of-binary") in problems(tmp_path, variant)
    for bad in ("bin/llama-server", "../llama-server", "..", "a\\b"):
        variant["platforms"]["linux"]["rocm"]["binary"] = bad
        assert ("platforms.linux.rocm.binary", "binary-name") in problems(tmp_path, variant), bad


def test_variant_only_fields_refused_in_passthrough(tmp_path, passthrough):
    passthrough["source"] = "https://example.invalid/x.tar.gz"
    passthrough["platforms"]["linux"]["cpu"]["binary"] = "x"
    passthrough["platforms"]["linux"]["cpu"]["sha256"] = "sha256:" + "00" * 32
    got = problems(tmp_path, passthrough)
    assert ("source", "provenance-without-variant-of") in got
    assert ("platforms.linux.cpu.binary", "variant-of-field") in got
    assert ("platforms.linux.cpu.sha256", "variant-of-field") in got


@pytest.mark.parametrize("key", ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "DYLD_INSERT_LIBRARIES"])
def test_loader_env_refused(tmp_path, passthrough, variant, key):
    passthrough["platforms"]["linux"]["cpu"]["env"] = {key: "/tmp/x.so", "OK_VAR": "1"}
    assert problems(tmp_path, passthrough) == [(f"platforms.linux.cpu.env.{key}", "loader-env")]
    variant["platforms"]["linux"]["rocm"]["arch"] = {"gfx1151": {"env": {key: "x"}}}
    assert (f"platforms.linux.rocm.arch.gfx1151.env.{key}", "loader-env") in problems(tmp_path, variant)


def test_arch_alias_token_needs_aliases(tmp_path, passthrough):
    passthrough["platforms"]["linux"]["cpu"]["args"] = ["img-{arch_alias}"]
    assert ("arch_aliases", "arch-alias-undeclared") in problems(tmp_path, passthrough)


def test_duplicate_keys_and_bad_json(tmp_path):
    p = write(tmp_path, '{"recipe": "ab", "recipe": "cd"}')
    assert any(x.rule == "duplicate-key" for x in lint_file(p))
    p = write(tmp_path, '{"recipe": ')
    [x] = lint_file(p)
    assert x.rule == "json-syntax" and "line 1" in x.message


def test_all_problems_reported_together_with_file_and_path(tmp_path, passthrough):
    passthrough["bogus"] = 1
    passthrough["requested_ports"] = 3
    passthrough["platforms"]["linux"]["cpu"]["args"] = ["{nope}"]
    path = write(tmp_path, passthrough)
    with pytest.raises(ManifestError) as e:
        load_recipe(path)
    text = str(e.value)
    assert len(e.value.problems) == 3
    for needle in (f"{path}: bogus", f"{path}: requested_ports", f"{path}: platforms.linux.cpu.args[0]"):
        assert needle in text


def test_model_is_frozen_and_typed(tmp_path, variant):
    variant["platforms"]["linux"]["rocm"]["env"] = {"A": "1"}
    r = load_recipe(write(tmp_path, variant))
    block = r.platforms["linux"]["rocm"]
    assert block.binary == "llama-server" and r.sha256 == "ab" * 32
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.recipe = "other"
    with pytest.raises(TypeError):
        block.env["A"] = "2"
    with pytest.raises(TypeError):
        r.platforms["linux"]["cuda"] = block
    assert json.loads(r.canonical) == variant


def test_reference_examples_load():
    for f in sorted((FIXTURES / "lemonade-examples").glob("*.json")):
        assert lint_file(f) == [], f


def test_seed_examples(tmp_path):
    seed = FIXTURES / "seed-examples"
    for name in ("13_llamacpp-vulkan-custom", "13_llamacpp-rocm-nightly", "13_llamacpp-per-platform",
                 "walkthrough_toolbox_llamacpp"):
        assert lint_file(seed / f"{name}.json") == [], name
    # The RFC abridges these three: display_name is required, so they fail (and say so).
    for name in ("13_dflash-rocm", "13_toolbox-arch-alias", "13_llamacpp-arch-overrides"):
        assert [(p.path, p.rule) for p in lint_file(seed / f"{name}.json")] == [("display_name", "missing-field")]


def test_load_from_text_names_memory():
    with pytest.raises(ManifestError) as e:
        load_recipe_text("[]")
    assert "<memory>" in str(e.value)


def test_source_must_be_https(tmp_path, variant):
    variant["source"] = "http://example.invalid/fork.tar.gz"
    assert problems(tmp_path, variant) == [("source", "source-https")]


def test_unknown_token_suggests_the_close_one(tmp_path, passthrough):
    passthrough["platforms"]["linux"]["cpu"]["args"] = ["{prot}", "{checkpont:main}"]
    msgs = [p.message for p in lint_file(write(tmp_path, passthrough))]
    assert "unknown token {prot} (did you mean {port}?)" in msgs
    assert "unknown token {checkpont:main} (did you mean {checkpoint:NAME}?)" in msgs


def test_an_override_may_not_re_pin_an_already_pinned_source(tmp_path, variant):
    variant["platforms"]["linux"]["rocm"]["arch"] = {"gfx1151": {"sha256": "sha256:" + "12" * 32}}
    assert problems(tmp_path, variant) == [("platforms.linux.rocm.arch.gfx1151.sha256", "sha256-conflict")]
    variant["platforms"]["linux"]["rocm"]["arch"] = {"gfx1151": {"sha256": variant["sha256"]}}
    assert problems(tmp_path, variant) == []
    # a source pinned only by the override (nothing above) is fine
    del variant["sha256"]
    variant["version_policy"] = "roll_forward"
    variant["platforms"]["linux"]["rocm"]["arch"] = {"gfx1151": {"sha256": "sha256:" + "12" * 32,
                                                                 "version_policy": "pinned"}}
    assert problems(tmp_path, variant) == []
