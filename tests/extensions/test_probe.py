"""Picking the provider for a model file (seed 002 section 4; lemonpack/extensions/probe.py), on
real GGUF files the tests write with the gguf package: the declarative probe's conditions and
first-yes-wins in registry order. (Reading the file's identity is tests/test_gguf_header.py.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from lemonpack.extensions.probe import NoProviderError, decide, evaluate, pick_provider
from lemonpack.gguf_header import read_identity

from support.gguf_files import GGUFValueType, QWEN4EXP_PROBE, deepseek4, llama, qwen4exp, write_gguf


@dataclass(frozen=True)
class P:  # the fields of manifest.Provider the probe code reads
    id: str
    capability: str
    probe: Any


@dataclass(frozen=True)
class Status:  # pipeline.ProviderStatus(extension, provider, available, reason)
    extension: str
    provider: P
    available: bool = True
    reason: str | None = None


def text(pid: str, probe: Any, ext: str = "ext", **kw) -> Status:
    return Status(ext, P(pid, "text_generation", probe), **kw)


DEEPSEEK_PROBE = {"format": "gguf", "architecture": ["deepseek4"]}
QWEN27_PROBE = {"format": "gguf", "architecture": ["qwen27"]}


# --- one probe ----------------------------------------------------------------------------------

@pytest.fixture
def q(tmp_path):
    return read_identity(qwen4exp(tmp_path / "q.gguf"))


def test_probe_yes_with_a_reason_per_condition(q):
    assert evaluate(QWEN4EXP_PROBE, q) == (True, [
        "general.architecture is 'qwen4exp', one of ['qwen4exp']",
        "metadata qwen4exp.expert_count is 4",
        "tensor blk.*.ffn_gate_exps.weight shape [8, 6, 4] matches (2 tensors)",
    ])


def test_architecture_condition(q):
    assert evaluate({"architecture": ["llama", "qwen4exp"]}, q)[0]
    assert evaluate({"architecture": ["llama"]}, q) == (
        False, ["general.architecture is 'qwen4exp', not one of ['llama']"])


@pytest.mark.parametrize("metadata, ok, reason", [
    ({"qwen4exp.expert_count": 4}, True, "metadata qwen4exp.expert_count is 4"),
    ({"qwen4exp.expert_count": 64}, False, "metadata qwen4exp.expert_count is 4 (uint32), not 64"),
    ({"qwen4exp.expert_count": True}, False, "metadata qwen4exp.expert_count is 4 (uint32), not true"),
    ({"qwen4exp.expert_count": "4"}, False, "metadata qwen4exp.expert_count is 4 (uint32), not '4'"),
    ({"general.name": "tiny qwen4exp"}, True, "metadata general.name is 'tiny qwen4exp'"),
    ({"general.name": "other"}, False, "metadata general.name is 'tiny qwen4exp' (string), not 'other'"),
    ({"qwen4exp.rope.dims": 64}, False, "metadata qwen4exp.rope.dims is absent, expected 64"),
])
def test_metadata_conditions(q, metadata, ok, reason):
    assert evaluate({"architecture": ["qwen4exp"], "metadata": metadata}, q) == (
        ok, ["general.architecture is 'qwen4exp', one of ['qwen4exp']", reason])


def test_metadata_booleans_and_floats_are_exact(tmp_path):
    ident = read_identity(llama(tmp_path / "l.gguf"))
    probe = {"architecture": ["llama"], "metadata": {"tokenizer.ggml.add_bos_token": True}}
    assert evaluate(probe, ident)[0]
    probe["metadata"] = {"tokenizer.ggml.add_bos_token": 1}
    assert evaluate(probe, ident)[1][1] == "metadata tokenizer.ggml.add_bos_token is true (bool), not 1"
    probe["metadata"] = {"llama.rope.freq_base": 10000}
    assert evaluate(probe, ident)[1][1] == "metadata llama.rope.freq_base is 10000.0 (float32), not 10000"
    probe["metadata"] = {"tokenizer.ggml.tokens": 3}
    assert evaluate(probe, ident)[1][1] == "metadata tokenizer.ggml.tokens is an array of 3 string (array), not 3"


@pytest.mark.parametrize("cond, ok, reason", [
    ({"name": "token_embd.weight"}, True, "tensor token_embd.weight is present (1 tensor)"),
    ({"name": "blk.*.ffn_gate_exps.weight"}, True, "tensor blk.*.ffn_gate_exps.weight is present (2 tensors)"),
    ({"name": "blk.?.attn_q.weight", "shape": [8, 8]}, True, "tensor blk.?.attn_q.weight shape [8, 8] matches (2 tensors)"),
    ({"name": "blk.[01].ffn_gate_exps.weight", "shape": [8, None, 4]}, True,
     "tensor blk.[01].ffn_gate_exps.weight shape [8, null, 4] matches (2 tensors)"),
    ({"name": "blk.*.ffn_gate_exps.weight", "shape": [8, 6, 64]}, False,
     "tensor blk.0.ffn_gate_exps.weight has shape [8, 6, 4], not [8, 6, 64]"),
    ({"name": "blk.*.ffn_gate_exps.weight", "shape": [8, 6]}, False,
     "tensor blk.0.ffn_gate_exps.weight has shape [8, 6, 4], not [8, 6]"),
    ({"name": "blk.*", "shape": [8, 8]}, False, "tensor blk.0.ffn_gate_exps.weight has shape [8, 6, 4], not [8, 8]"),
    ({"name": "output.weight"}, False, "no tensor matches output.weight"),
    ({"name": "blk.*.ffn_gate.weight", "present": True}, False, "no tensor matches blk.*.ffn_gate.weight"),
    ({"name": "output.weight", "present": False}, True, "tensor output.weight is absent"),
    ({"name": "blk.*.ffn_gate_exps.weight", "present": False}, False,
     "tensor blk.*.ffn_gate_exps.weight should be absent, but blk.0.ffn_gate_exps.weight is present (and 1 more)"),
    ({"name": "blk.0.ffn_gate_exps.weigh"}, False, "no tensor matches blk.0.ffn_gate_exps.weigh"),  # exact, not prefix
])
def test_tensor_conditions(q, cond, ok, reason):
    assert evaluate({"architecture": ["qwen4exp"], "tensors": [cond]}, q) == (
        ok, ["general.architecture is 'qwen4exp', one of ['qwen4exp']", reason])


def test_every_condition_is_reported_not_only_the_first_failure(q):
    ok, reasons = evaluate({"architecture": ["qwen4exp"], "metadata": {"x": 1, "qwen4exp.expert_count": 4},
                            "tensors": [{"name": "output.weight"}, {"name": "token_embd.weight"}]}, q)
    assert not ok and reasons[1:] == ["metadata x is absent, expected 1", "metadata qwen4exp.expert_count is 4",
                                      "no tensor matches output.weight", "tensor token_embd.weight is present (1 tensor)"]


def test_another_architecture_is_the_only_reason(q):
    assert evaluate({"architecture": ["llama"], "metadata": {"x": 1}, "tensors": [{"name": "output.weight"}]}, q) == (
        False, ["general.architecture is 'qwen4exp', not one of ['llama']"])


def test_missing_probe_and_other_formats_say_no(q):
    assert evaluate(None, q) == (False, ["declares no declarative probe (its probe is code in the extension, "
                                         "which lemonpack does not run)"])
    assert evaluate({"format": "safetensors", "architecture": ["qwen4exp"]}, q) == (
        False, ["probe format 'safetensors' does not read a gguf file"])


# --- asking the providers in order --------------------------------------------------------------

def test_seed_figure_4_first_yes_wins(q):
    # seed 002 fig. 4: deepseek4 and qwen27-q4 say no; flash-next-q4 says yes
    providers = [text("deepseek4", DEEPSEEK_PROBE, "deepseek_v4_flash"), text("qwen27-q4", QWEN27_PROBE, "qwen"),
                 text("flash-next-q4", QWEN4EXP_PROBE, "qwen38_flash_next")]
    d = pick_provider(q, providers)
    assert (d.chosen.extension, d.chosen.provider) == ("qwen38_flash_next", "flash-next-q4")
    assert [(c.provider, c.answer, c.chosen) for c in d.candidates] == [
        ("deepseek4", False, False), ("qwen27-q4", False, False), ("flash-next-q4", True, True)]
    assert d.candidates[0].reasons == ("general.architecture is 'qwen4exp', not one of ['deepseek4']",)


def test_two_yes_the_first_in_registry_order_wins(q):
    a = text("community-q4", {"architecture": ["qwen4exp"]}, "community")
    b = text("flash-next-q4", QWEN4EXP_PROBE, "qwen38_flash_next")
    assert pick_provider(q, [a, b]).chosen.provider == "community-q4"
    d = pick_provider(q, [b, a])
    assert d.chosen.provider == "flash-next-q4"
    assert [(c.provider, c.answer, c.chosen) for c in d.candidates] == [
        ("flash-next-q4", True, True), ("community-q4", True, False)]


def test_unavailable_providers_are_listed_not_asked(q):
    hip = text("flash-next-q4", QWEN4EXP_PROBE, "qwen38_flash_next", available=False,
               reason="target gufo_qwen38_flash_next_hip not built: needs hip")
    with pytest.raises(NoProviderError) as e:
        pick_provider(q, [hip])
    assert str(e.value) == "No text provider found for model architecture 'qwen4exp'"
    [c] = e.value.decision.candidates
    assert (c.available, c.answer, c.reasons) == (
        False, None, ("unavailable: target gufo_qwen38_flash_next_hip not built: needs hip",))
    assert e.value.to_json()["decision"]["candidates"][0]["asked"] is False
    # an available one later in the order is then the one asked
    assert pick_provider(q, [hip, text("fallback", {"architecture": ["qwen4exp"]})]).chosen.provider == "fallback"


def test_only_providers_of_the_capability_are_asked(q):
    emb = Status("embedding_gemma2", P("gemma-embed", "embeddings", {"architecture": ["qwen4exp"]}))
    d = decide(q, [emb, text("deepseek4", DEEPSEEK_PROBE)])
    assert not d.ok and [c.provider for c in d.candidates] == ["deepseek4"]
    assert d.message == "No text provider found for model architecture 'qwen4exp'"
    assert pick_provider(q, [emb, text("deepseek4", DEEPSEEK_PROBE)], "embeddings").chosen.provider == "gemma-embed"
    with pytest.raises(NoProviderError, match="^No embeddings provider found for model architecture 'qwen4exp'$"):
        pick_provider(q, [text("flash-next-q4", QWEN4EXP_PROBE)], "embeddings")
    with pytest.raises(NoProviderError, match="^No speech recognition provider found"):
        pick_provider(q, [], "speech_recognition")


def test_deepseek_and_llama_files(tmp_path):
    providers = [text("deepseek4", {"architecture": ["deepseek4"], "metadata": {"deepseek4.expert_count": 8},
                                    "tensors": [{"name": "blk.*.attn_kv_a_mqa.weight"}]}),
                 text("flash-next-q4", QWEN4EXP_PROBE)]
    assert pick_provider(read_identity(deepseek4(tmp_path / "d.gguf")), providers).chosen.provider == "deepseek4"
    with pytest.raises(NoProviderError, match="^No text provider found for model architecture 'llama'$"):
        pick_provider(read_identity(llama(tmp_path / "l.gguf")), providers)


def test_decision_json_shape(q):
    d = decide(q, [text("deepseek4", DEEPSEEK_PROBE, "ds"), text("flash-next-q4", QWEN4EXP_PROBE, "qf")])
    j = d.to_json()
    assert j["ok"] and j["chosen"] == {"extension": "qf", "provider": "flash-next-q4"}
    assert j["architecture"] == "qwen4exp" and j["capability"] == "text_generation"
    assert [c["answer"] for c in j["candidates"]] == [False, True]


def test_hostile_strings_print_on_one_line(tmp_path):
    ident = read_identity(write_gguf(tmp_path / "h.gguf", "evil\n\x1b[31m", {"k": (" x\r\n", GGUFValueType.STRING)}))
    assert ident.architecture == "evil\n\x1b[31m"
    ok, reasons = evaluate({"architecture": ["llama"], "metadata": {"k": "x"}}, ident)
    assert all("\n" not in r and "\x1b" not in r and "\r" not in r for r in reasons)
    with pytest.raises(NoProviderError) as e:
        pick_provider(ident, [text("a", {"architecture": ["llama"]})])
    assert "\n" not in str(e.value) and "\x1b" not in str(e.value)


def test_file_without_architecture(tmp_path):
    ident = read_identity(write_gguf(tmp_path / "n.gguf", None, {"general.name": "x"}, {"a": [4]}))
    assert ident.architecture is None
    ok, reasons = evaluate(QWEN4EXP_PROBE, ident)
    assert not ok and reasons[0] == "general.architecture is missing, not one of ['qwen4exp']"
    with pytest.raises(NoProviderError) as e:
        pick_provider(ident, [text("flash-next-q4", QWEN4EXP_PROBE)])
    assert str(e.value) == ("No text provider found for model architecture "
                            "(none: the file has no general.architecture)")


def test_non_string_architecture_is_no_architecture(tmp_path):
    ident = read_identity(write_gguf(tmp_path / "n.gguf", None, {"general.architecture": 7}))
    assert ident.architecture is None
    assert evaluate(QWEN4EXP_PROBE, ident)[1][0] == "general.architecture is 7 (uint32), not a string"
