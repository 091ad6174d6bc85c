"""Picking the provider for a model file (seed 002 section 4), on real GGUF files the tests
write with the gguf package: reading the identity without tensor data, the declarative
probe's conditions, and first-yes-wins in registry order."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import pytest

from lemonpack.errors import LemonpackError
from lemonpack.extensions.probe import NoProviderError, decide, evaluate, pick_provider
from lemonpack.gguf_header import ArrayValue, ModelFileError, read_identity
from support.gguf_files import QWEN4EXP_PROBE, GGUFValueType, deepseek4, llama, qwen4exp, write_gguf


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


# --- reading ------------------------------------------------------------------------------------

def test_identity_of_a_real_file_matches_ggufreader(tmp_path):
    path = qwen4exp(tmp_path / "m.gguf")
    ident = read_identity(path)
    assert ident.architecture == "qwen4exp"
    assert ident.metadata["qwen4exp.expert_count"] == 4
    assert ident.metadata_types["qwen4exp.expert_count"] == "uint32"
    assert ident.metadata["general.name"] == "tiny qwen4exp"
    # the gguf package's own reader is the oracle for names, shapes, types and offsets
    ref = gguf.GGUFReader(path)
    assert [(t.name, t.shape, t.type, t.offset) for t in ident.tensors] == [
        (t.name, tuple(int(d) for d in t.shape), t.tensor_type.name, int(t.data_offset) - ref.data_offset)
        for t in ref.tensors]
    assert [k for k in ident.metadata] == [k for k in ref.fields if not k.startswith("GGUF.")]
    assert ident.tensors[1].shape == (8, 6, 4)  # GGML order, as gguf reports it
    assert ident.header_bytes < os.path.getsize(path)


def test_a_header_larger_than_the_read_window_matches_ggufreader(tmp_path):
    # 3,000 tensor infos (~250 KiB) and a 20,000-string array: several window refills,
    # entries split across window ends
    names = {f"blk.{i}.{'x' * (i % 97)}.weight": [1 + i % 3, 2] for i in range(3000)}
    path = write_gguf(tmp_path / "wide.gguf", "llama", {"tokenizer.ggml.tokens": [f"t{i}" for i in range(20000)],
                                                        "general.name": "after the array"}, names)
    ident = read_identity(path)
    ref = gguf.GGUFReader(path)
    assert ident.header_bytes > 4 * 64 * 1024
    assert ident.metadata["general.name"] == "after the array"
    assert ident.metadata["tokenizer.ggml.tokens"] == ArrayValue("string", 20000)
    assert [(t.name, t.shape, t.offset) for t in ident.tensors] == [
        (t.name, tuple(int(d) for d in t.shape), int(t.data_offset) - ref.data_offset) for t in ref.tensors]


def test_metadata_types_and_arrays_are_summarised(tmp_path):
    ident = read_identity(llama(tmp_path / "l.gguf"))
    assert ident.metadata["tokenizer.ggml.tokens"] == ArrayValue("string", 3)
    assert ident.metadata["tokenizer.ggml.add_bos_token"] is True
    assert ident.metadata["llama.rope.freq_base"] == 10000.0
    assert ident.to_json()["metadata"]["tokenizer.ggml.tokens"] == {
        "type": "array", "value": {"element_type": "string", "length": 3}}


def test_big_endian_file(tmp_path):
    path = write_gguf(tmp_path / "be.gguf", "qwen4exp", {"qwen4exp.expert_count": 4},
                      {"blk.0.ffn_gate_exps.weight": [8, 6, 4]}, big_endian=True)
    ident = read_identity(path)
    assert (ident.architecture, ident.metadata["qwen4exp.expert_count"]) == ("qwen4exp", 4)
    assert ident.tensors[0].shape == (8, 6, 4)


def test_tensor_data_is_never_read(tmp_path):
    # infos declaring 64 GiB of weights, none of which is in the file: the identity reads
    # (gguf.GGUFReader cannot open this file: it maps every tensor's data)
    path = write_gguf(tmp_path / "header-only.gguf", "qwen4exp", {"qwen4exp.expert_count": 64},
                      {"blk.0.ffn_gate_exps.weight": [65536, 4096, 64]}, with_data=False)
    ident = read_identity(path)
    assert ident.tensors[0].shape == (65536, 4096, 64)
    assert os.path.getsize(path) < 4096
    assert evaluate({"architecture": ["qwen4exp"], "tensors": [
        {"name": "blk.*.ffn_gate_exps.weight", "shape": [65536, 4096, 64]}]}, ident)[0]
    with pytest.raises(ValueError):
        gguf.GGUFReader(path)


def test_reads_only_the_header_of_a_large_file(tmp_path):
    # the same header followed by 8 GiB of (sparse) tensor data: the bytes the process reads
    # (/proc/self/io rchar) stay within one 64 KiB window
    path = write_gguf(tmp_path / "big.gguf", "llama", {"llama.block_count": 1},
                      {"output.weight": [65536, 32768]}, with_data=False)
    os.truncate(path, 8 * 2**30)

    def rchar() -> int:
        return int(dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())["rchar"])
    before = rchar()
    ident = read_identity(path)
    assert rchar() - before <= 64 * 1024 + 4096
    assert ident.tensors[0].shape == (65536, 32768)


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


def _header_end(path: Path) -> int:
    return read_identity(path).header_bytes


@pytest.mark.parametrize("cut", [0, 3, 4, 7, 8, 20, 30, "mid-kv", "mid-tensor-info"])
def test_truncated_files_name_the_file(tmp_path, cut):
    full = qwen4exp(tmp_path / "full.gguf")
    end = _header_end(full)
    n = {"mid-kv": 60, "mid-tensor-info": end - 5}.get(cut, cut)
    path = tmp_path / "cut.gguf"
    path.write_bytes(full.read_bytes()[:n])
    with pytest.raises(ModelFileError) as e:
        read_identity(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: ")
    assert ("truncated GGUF file" in msg) if n >= 4 else ("not a GGUF file" in msg)
    assert e.value.exit_code == 1 and isinstance(e.value, LemonpackError)


def test_a_header_cut_exactly_after_the_tensor_infos_reads(tmp_path):
    full = qwen4exp(tmp_path / "full.gguf")
    path = tmp_path / "cut.gguf"
    path.write_bytes(full.read_bytes()[:_header_end(full)])
    assert len(read_identity(path).tensors) == 5


@pytest.mark.parametrize("content, says", [
    (b"", "not a GGUF file (empty;"),
    (b"{\"recipe\": \"x\"}", "not a GGUF file (starts with b'{\"re', not b'GGUF')"),
    (b"GGUF" + struct.pack("<I", 1) + b"\0" * 16, "GGUF version 1 is not supported (supported: 2, 3)"),
    (b"GGUF" + struct.pack("<I", 99) + b"\0" * 16, "GGUF version 99 is not supported"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**40) + b"k",
     "a string of 1099511627776 bytes at offset 24 exceeds the 65535-byte limit"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 77),
     "unknown GGUF value type 77"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 8, 2**62),
     "an array of 4611686018427387904 string cannot fit"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 4, 2**62),
     "truncated GGUF file: reading key/value 1 of 1 (k) needs 18446744073709551616 bytes"),
    (b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<I", 9),
     "tensor 't' has 9 dimensions (at most 4)"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + (struct.pack("<Q", 1) + b"k" + struct.pack("<IB", 7, 1)) * 2,
     "duplicate metadata key 'k'"),
    (b"GGUF" + struct.pack("<IQQ", 3, 2, 0) + (struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 4, 0, 0)) * 2,
     "duplicate tensor name 't' (tensor info 2 of 2)"),
])
def test_bad_files_are_clear_errors(tmp_path, content, says):
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelFileError) as e:
        read_identity(path)
    assert str(e.value).startswith(f"{path}: ") and says in str(e.value), str(e.value)


def test_missing_directory_and_device(tmp_path):
    with pytest.raises(ModelFileError, match="^model file not found: .*nope.gguf$"):
        read_identity(tmp_path / "nope.gguf")
    with pytest.raises(ModelFileError, match="is a directory"):
        read_identity(tmp_path)
    with pytest.raises(ModelFileError, match="not a regular file"):
        read_identity("/dev/null")
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)  # no writer: opening must not wait for one
    with pytest.raises(ModelFileError, match="not a regular file"):
        read_identity(fifo)


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
