"""How much memory a model's engine will hold, estimated before it starts (the serve budget it is
measured against is :mod:`lemonpack.runtime.serving.budget`).

:func:`estimate_model` is the one estimate (``lemonpack serve`` admission, ``lemonpack
select``):

- **GGUF**: the tensor bytes from the header (each tensor's element count / the GGML type's
  block size x the block's bytes, ``gguf.GGML_QUANT_SIZES``), plus the KV cache at the
  context size the launch plan sets. The KV formula is llama.cpp's (``llama_kv_cache``
  allocates one K and one V tensor per layer, ``src/llama-kv-cache.cpp``)::

      kv_bytes = n_layer * n_ctx * (n_embd_k_gqa * bytes(cache_type_k) + n_embd_v_gqa * bytes(cache_type_v))
      n_embd_k_gqa = key_length * n_head_kv     (key_length default n_embd / n_head)
      n_embd_v_gqa = value_length * n_head_kv   (value_length default n_embd / n_head)

  read from ``<arch>.block_count``, ``<arch>.embedding_length``,
  ``<arch>.attention.head_count``/``head_count_kv``/``key_length``/``value_length``. With
  both cache types f16 this is llama.cpp's ``2 x n_layer x n_ctx x n_embd_k_gqa x 2`` bytes.
  Compute buffers and the context's activations are not counted (the budget's headroom is
  for them).
- **anything else** (a safetensors file, an ONNX directory, an unreadable GGUF): the size
  on disk (a directory: the sum of its regular files).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from lemonpack.errors import LemonpackError, UnreadableFileError


@dataclass(frozen=True)
class Estimate:
    """``weights`` + ``kv`` = ``total`` bytes; ``how`` says where the figure comes from."""

    weights: int
    kv: int
    how: str

    @property
    def total(self) -> int:
        return self.weights + self.kv


def _disk_size(path: str) -> int:
    if os.path.isdir(path):
        total = 0
        for root, _dirs, files in os.walk(path):
            for f in files:
                p = os.path.join(root, f)
                if os.path.isfile(p) and not os.path.islink(p):
                    total += os.path.getsize(p)
        return total
    return os.path.getsize(path)


def _elem_bytes(type_name: str) -> float:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name.upper()]]
    except KeyError:
        return 2.0  # an unknown cache type: f16
    return size / block


def _first(v) -> int:
    """A metadata number (an array per layer: its largest)."""
    if hasattr(v, "__len__") and not isinstance(v, (str, bytes)):
        return int(max(v)) if len(v) else 0
    return int(v)


#: The metadata keys whose arrays (one element per layer) the estimate reads: their largest.
_PER_LAYER = (".block_count", ".embedding_length", ".attention.head_count", ".attention.head_count_kv",
              ".attention.key_length", ".attention.value_length")


def estimate_gguf(path: str, ctx_size: int, cache_type_k: str = "f16", cache_type_v: str = "f16") -> Estimate:
    """Tensor bytes and KV cache of the GGUF file at ``path`` (module docstring), from its
    header (:func:`lemonpack.gguf_header.read_identity`, the one GGUF reader). Raises
    :class:`~lemonpack.gguf_header.ModelFileError` (a :class:`LemonpackError`) when it is not a
    readable GGUF file."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    from lemonpack.gguf_header import ArrayValue, read_identity  # imports gguf (numpy): only when asked

    identity = read_identity(path, numbers=lambda key: key.endswith(_PER_LAYER))
    weights = 0
    for t in identity.tensors:
        try:
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType[t.type]]
        except KeyError:
            block, size = 1, 4
        weights += math.prod(t.shape) // block * size

    def meta(key: str):
        v = identity.metadata.get(key)
        return None if isinstance(v, ArrayValue) else v

    arch = identity.architecture
    kv = 0
    how = f"GGUF tensors {weights} B"
    if arch:
        n_layer = meta(f"{arch}.block_count")
        n_embd = meta(f"{arch}.embedding_length")
        n_head = meta(f"{arch}.attention.head_count")
        if n_layer and n_embd and n_head:
            n_head = _first(n_head)
            n_head_kv = _first(meta(f"{arch}.attention.head_count_kv") or n_head)
            k_len = _first(meta(f"{arch}.attention.key_length") or int(n_embd) // max(n_head, 1))
            v_len = _first(meta(f"{arch}.attention.value_length") or int(n_embd) // max(n_head, 1))
            kv = int(_first(n_layer) * ctx_size * (k_len * n_head_kv * _elem_bytes(cache_type_k)
                                                   + v_len * n_head_kv * _elem_bytes(cache_type_v)))
            how += f" + KV cache {kv} B (n_layer {_first(n_layer)}, n_ctx {ctx_size}, " \
                   f"n_embd_k_gqa {k_len * n_head_kv}, {cache_type_k}/{cache_type_v})"
    return Estimate(weights, kv, how)


def estimate_model(path: str, ctx_size: int = 4096, cache_type_k: str = "f16", cache_type_v: str = "f16") -> Estimate:
    """The memory ``path``'s engine will hold (module docstring): GGUF weights + KV cache at
    ``ctx_size``, else the size on disk. Raises :class:`LemonpackError` when ``path`` cannot
    be read at all."""
    try:
        if os.path.isfile(path):
            with open(path, "rb") as f:
                magic = f.read(4)
            if magic == b"GGUF":
                try:
                    return estimate_gguf(path, ctx_size, cache_type_k, cache_type_v)
                except LemonpackError:
                    pass
        return Estimate(_disk_size(path), 0, "size on disk")
    except OSError as e:
        raise UnreadableFileError(f"{path}: cannot read: {e.strerror or e}") from None


__all__ = ["Estimate", "estimate_gguf", "estimate_model"]
