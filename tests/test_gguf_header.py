"""The one GGUF header reader (lemonpack/gguf_header.py) on real files the tests write with the
gguf package: the identity (architecture, metadata, tensor infos) read without tensor data and
only within the header, against gguf's own GGUFReader; truncated and bad files named."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import gguf
import pytest

from lemonpack.errors import LemonpackError
from lemonpack.extensions.probe import evaluate
from lemonpack.gguf_header import ArrayValue, ModelFileError, read_identity

from support.gguf_files import llama, qwen4exp, write_gguf


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
