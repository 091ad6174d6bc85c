"""Real GGUF files for the probe tests, written with the ``gguf`` package's GGUFWriter.

Shapes are given as gguf reports them (GGML order, ``ne[0]`` first: ``[2048, 768, 64]``);
the writer takes numpy order, so they are reversed on the way in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFEndian, GGUFValueType, GGUFWriter

#: The probe of the seed's flash-next-q4 provider (the seed's example), on small shapes.
QWEN4EXP_PROBE = {"format": "gguf", "architecture": ["qwen4exp"], "metadata": {"qwen4exp.expert_count": 4},
                  "tensors": [{"name": "blk.*.ffn_gate_exps.weight", "present": True, "shape": [8, 6, 4]}]}


def _put(w: GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, tuple):  # (value, GGUFValueType) for an explicit type
        value, vtype = value
        w.add_key_value(key, value, vtype)
    elif isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    else:
        w.add_array(key, list(value))


def write_gguf(path: Path, arch: str | None = "llama", metadata: dict[str, Any] | None = None,
               tensors: dict[str, list[int]] | None = None, *, with_data: bool = True,
               big_endian: bool = False, types: dict[str, "GGMLQuantizationType"] | None = None) -> Path:
    """Write a GGUF at ``path``: ``general.architecture = arch`` (omitted when None), the
    ``metadata`` (int -> uint32, float -> float32, bool, str, list -> array, or an explicit
    ``(value, GGUFValueType)``), and float32 ``tensors`` name -> GGML-order shape. With
    ``with_data=False`` only the header, key/values and tensor infos are written: the tensor
    data the infos declare is absent; ``types`` then gives a tensor a GGML storage type other
    than F32 (``{"blk.0.ffn_gate_exps.weight": GGMLQuantizationType.Q4_K}``). Returns ``path``."""
    w = GGUFWriter(path, arch or "unused", endianess=GGUFEndian.BIG if big_endian else GGUFEndian.LITTLE)
    if arch is None:
        del w.kv_data[0]["general.architecture"]
    for key, value in (metadata or {}).items():
        _put(w, key, value)
    for name, shape in (tensors or {}).items():
        np_shape = tuple(reversed(shape))
        if with_data:
            w.add_tensor(name, np.zeros(np_shape, dtype=np.float32))
        elif name in (types or {}):
            qtype = types[name]
            block, size = GGML_QUANT_SIZES[qtype]
            byte_shape = (*np_shape[:-1], np_shape[-1] // block * size)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape, dtype=np.int64)),
                              raw_dtype=qtype)
        else:
            w.add_tensor_info(name, np_shape, np.dtype(np.float32), 4 * int(np.prod(np_shape, dtype=np.int64)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    if with_data:
        w.write_tensors_to_file()
    else:
        w.write_ti_data_to_file()
    w.close()
    return path


def qwen4exp(path: Path, *, experts: int = 4, layers: int = 2, with_data: bool = True) -> Path:
    """A tiny MoE model in the seed's ``qwen4exp`` architecture (matches :data:`QWEN4EXP_PROBE`)."""
    tensors = {"token_embd.weight": [8, 16]}
    for i in range(layers):
        tensors[f"blk.{i}.ffn_gate_exps.weight"] = [8, 6, experts]
        tensors[f"blk.{i}.attn_q.weight"] = [8, 8]
    return write_gguf(path, "qwen4exp", {"qwen4exp.expert_count": experts, "qwen4exp.block_count": layers,
                                        "general.name": "tiny qwen4exp"}, tensors, with_data=with_data)


def deepseek4(path: Path) -> Path:
    """A tiny ``deepseek4`` model."""
    return write_gguf(path, "deepseek4", {"deepseek4.expert_count": 8, "deepseek4.leading_dense_block_count": 1},
                      {"blk.0.ffn_gate.weight": [8, 6], "blk.1.ffn_gate_exps.weight": [8, 6, 8],
                       "blk.1.attn_kv_a_mqa.weight": [8, 4]})


def llama(path: Path) -> Path:
    """A tiny ``llama`` model with a tokenizer array and a float key."""
    return write_gguf(path, "llama", {"llama.block_count": 1, "llama.rope.freq_base": 10000.0,
                                      "tokenizer.ggml.tokens": ["a", "b", "c"],
                                      "tokenizer.ggml.add_bos_token": True},
                      {"blk.0.attn_q.weight": [8, 8], "output.weight": [8, 16]})


__all__ = ["GGMLQuantizationType", "QWEN4EXP_PROBE", "deepseek4", "llama", "qwen4exp", "write_gguf", "GGUFValueType"]
