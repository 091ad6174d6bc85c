"""How much memory a model's engine will hold, estimated before it starts; the serve budget.

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

:func:`default_budget` is the host's available RAM (``MemAvailable`` of ``/proc/meminfo``)
minus :data:`HEADROOM`; :func:`parse_size` reads ``24GiB`` / ``512MiB`` / ``1000000``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from lemonpack.errors import InputError, LemonpackError, UnreadableFileError

#: Kept free of the host's available RAM by the default budget (OS, serve itself, compute buffers).
HEADROOM = 1 << 30

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 1 << 10, "m": 10**6, "mb": 10**6, "mib": 1 << 20,
          "g": 10**9, "gb": 10**9, "gib": 1 << 30, "t": 10**12, "tb": 10**12, "tib": 1 << 40}


@dataclass(frozen=True)
class Estimate:
    """``weights`` + ``kv`` = ``total`` bytes; ``how`` says where the figure comes from."""

    weights: int
    kv: int
    how: str

    @property
    def total(self) -> int:
        return self.weights + self.kv


def parse_size(text: str) -> int:
    """Bytes from ``24GiB``, ``1.5 GB``, ``512MiB``, ``1000000`` (SI and binary units).
    Raises :class:`LemonpackError` naming the text for anything else or a size <= 0."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text or "")
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise InputError(f"size {text!r}: expected a number with an optional unit (24GiB, 512MiB, 8GB)")
    n = int(float(m.group(1)) * _UNITS[unit])
    if n <= 0:
        raise InputError(f"size {text!r} must be more than 0 bytes")
    return n


def available_ram(meminfo: str = "/proc/meminfo") -> int | None:
    """``MemAvailable`` in bytes (None when it cannot be read)."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def default_budget(meminfo: str = "/proc/meminfo") -> int | None:
    """The host's available RAM minus :data:`HEADROOM` (None: unknown, no limit)."""
    ram = available_ram(meminfo)
    return None if ram is None else max(ram - HEADROOM, 1 << 20)


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


def estimate_gguf(path: str, ctx_size: int, cache_type_k: str = "f16", cache_type_v: str = "f16") -> Estimate:
    """Tensor bytes and KV cache of the GGUF file at ``path`` (module docstring). Raises
    :class:`LemonpackError` when it is not a readable GGUF file."""
    from gguf import GGUFReader
    from gguf.constants import GGML_QUANT_SIZES

    try:
        r = GGUFReader(path, "r")
    except Exception as e:  # noqa: BLE001 (the reader raises ValueError, OSError, struct errors ...)
        raise InputError(f"{path}: not a readable GGUF file: {e}") from None
    weights = 0
    for t in r.tensors:
        block, size = GGML_QUANT_SIZES.get(t.tensor_type, (1, 4))
        weights += int(t.n_elements) // block * size

    def meta(key: str):
        f = r.fields.get(key)
        if f is None:
            return None
        vals = [f.parts[i].tolist() for i in f.data]
        vals = [v[0] if isinstance(v, list) and len(v) == 1 else v for v in vals]
        return vals[0] if len(vals) == 1 else vals

    arch_f = r.fields.get("general.architecture")
    arch = bytes(arch_f.parts[arch_f.data[0]]).decode() if arch_f is not None else None
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


__all__ = ["Estimate", "HEADROOM", "available_ram", "default_budget", "estimate_gguf", "estimate_model", "parse_size"]
