"""Memory estimates (lemonpack/runtime/models/memory.py): GGUF tensors + KV cache, else size on disk."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFWriter

from lemonpack.errors import LemonpackError
from lemonpack.runtime.models.memory import estimate_model


def _gguf(path, n_layer=2, n_embd=64, n_head=8, n_head_kv=2):
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(n_layer)
    w.add_embedding_length(n_embd)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_tensor("tok_embd.weight", np.zeros((100, n_embd), dtype=np.float32))  # 25,600 B
    w.add_tensor("out.weight", np.zeros((n_embd,), dtype=np.float16))  # 128 B
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def test_gguf_is_tensor_bytes_plus_llama_cpp_kv_cache(tmp_path):
    p = tmp_path / "m.gguf"
    _gguf(p)
    e = estimate_model(str(p), ctx_size=1024)
    assert e.weights == 100 * 64 * 4 + 64 * 2
    # 2 (K and V) x n_layer x n_ctx x n_embd_k_gqa (64/8 * 2 heads) x 2 bytes (f16)
    assert e.kv == 2 * 2 * 1024 * 16 * 2
    assert estimate_model(str(p), ctx_size=2048).kv == 2 * e.kv
    assert estimate_model(str(p), 1024, "q8_0", "q8_0").kv == int(2 * 2 * 1024 * 16 * 34 / 32)


def test_per_layer_counts_count_their_largest_and_a_header_only_file_is_estimated(tmp_path):
    """The one GGUF reader (lemonpack.gguf_header) reads a per-layer array whole; a file whose
    tensor data is absent (a partial download) is estimated from its header."""
    p = tmp_path / "layers.gguf"
    w = GGUFWriter(str(p), "llama")
    w.add_block_count(3)
    w.add_embedding_length(64)
    w.add_head_count(8)
    w.add_array("llama.attention.head_count_kv", [2, 4, 1])
    w.add_tensor("out.weight", np.zeros((64,), dtype=np.float16))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    e = estimate_model(str(p), ctx_size=1024)
    assert (e.weights, e.kv) == (128, 2 * 3 * 1024 * (8 * 4) * 2)
    head = tmp_path / "head.gguf"
    data = p.read_bytes()
    head.write_bytes(data[:len(data) - 128])  # the tensor data cut off
    assert estimate_model(str(head), ctx_size=1024) == e


def test_other_files_are_their_size_on_disk(tmp_path):
    (tmp_path / "m.safetensors").write_bytes(b"x" * 1000)
    assert estimate_model(str(tmp_path / "m.safetensors")).total == 1000
    (tmp_path / "bad.gguf").write_bytes(b"GGUF fake")
    assert estimate_model(str(tmp_path / "bad.gguf")).total == 9
    with pytest.raises(LemonpackError):
        estimate_model(str(tmp_path / "missing"))


