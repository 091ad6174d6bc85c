"""The identity of a GGUF model file, read from its header alone (one GGUF reader for every
room: the provider probes of :mod:`lemonpack.extensions.probe`, the memory estimate of
:mod:`lemonpack.runtime.models.memory`).

:func:`read_identity` reads the GGUF header and tensor-info section only (format:
https://github.com/ggml-org/ggml/blob/master/docs/gguf.md, versions 2 and 3, either byte
order). It does not use :class:`gguf.GGUFReader`, only the ``gguf`` package's constants
(magic, value types, GGML tensor types): the reader memory-maps the whole file and builds
numpy views over every tensor's data, so it fails on a file whose tensor data is absent
(a header-only or partly downloaded file), and it builds one numpy object per element of
every metadata array (4.3 s for a 150,000-token vocabulary here, against ~0.1 s for this
reader, which skips arrays without materialising them). Reads are windowed
(64 KiB, grown on demand), never past the tensor-info section, never a memory map (a file
truncated while mapped would kill the process with SIGBUS).
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from lemonpack.errors import LemonpackError, one_line

#: GGUF constants, from the ``gguf`` package (the format's reference implementation).
from gguf.constants import GGUF_MAGIC, GGMLQuantizationType, GGUFValueType


#: GGUF versions read (1 used 32-bit counts and is obsolete; the gguf package reads 2 and 3).
SUPPORTED_VERSIONS = (2, 3)


#: Most dimensions a GGML tensor has.
MAX_DIMS = 4


#: Longest metadata key and tensor name read (bytes); the GGUF spec caps keys at 65535.
MAX_NAME = 65535


#: Longest string value read (bytes): chat templates are tens of KiB; a 16 MiB one is hostile.
MAX_STRING = 16 * 2**20


#: Deepest nesting of metadata arrays followed.
MAX_ARRAY_DEPTH = 4


#: Most tensor infos a header may declare: a real model has hundreds to a few thousand (tens of
#: thousands with one tensor per expert); each one read is kept, so the count bounds memory.
MAX_TENSORS = 131072


#: Most metadata key/values a header may declare (real models: tens; the vocabulary is one array).
MAX_KV = 65536


#: Most bytes of names and string values kept from one header (keys, string values, tensor
#: names): with the caps above, what one probe holds in memory is bounded (~100 MB).
MAX_KEPT_BYTES = 64 * 2**20
#: Most elements of a numeric metadata array read whole when asked (``numbers``): per-layer
#: counts have one element per layer.
MAX_NUMBERS = 65536


_WINDOW = 64 * 1024


_SCALARS: dict[int, tuple[str, str]] = {  # GGUF value type -> (struct code, name)
    GGUFValueType.UINT8: ("B", "uint8"), GGUFValueType.INT8: ("b", "int8"),
    GGUFValueType.UINT16: ("H", "uint16"), GGUFValueType.INT16: ("h", "int16"),
    GGUFValueType.UINT32: ("I", "uint32"), GGUFValueType.INT32: ("i", "int32"),
    GGUFValueType.FLOAT32: ("f", "float32"), GGUFValueType.BOOL: ("B", "bool"),
    GGUFValueType.UINT64: ("Q", "uint64"), GGUFValueType.INT64: ("q", "int64"),
    GGUFValueType.FLOAT64: ("d", "float64"),
}


_GGML_TYPES = {int(t): t.name for t in GGMLQuantizationType}


_TYPE_NAMES = {**{k: v[1] for k, v in _SCALARS.items()}, GGUFValueType.STRING: "string", GGUFValueType.ARRAY: "array"}


class ModelFileError(LemonpackError):
    """A model file could not be read as a GGUF: missing, not a regular file, unreadable,
    not GGUF (wrong magic), an unsupported version, or a header that is truncated or
    inconsistent. The message starts with the file's path. Exit code 1."""

    kind = "model-file"


class TruncatedGGUFError(ModelFileError):
    """A GGUF file that ends inside its header or tensor-info section: a partly downloaded file,
    or a header prefix too short (:func:`lemonpack.runtime.models.pull.fetch_gguf_header` reads a
    longer one)."""


@dataclass(frozen=True)
class ArrayValue:
    """A metadata array, summarised: its element type name (``string``, ``uint32``, ``array``
    ...) and length. Arrays are never materialised (a vocabulary has 150,000 strings)."""

    element_type: str
    length: int

    def __str__(self) -> str:
        return f"an array of {self.length} {self.element_type}"


class TensorInfo(NamedTuple):
    """One tensor's description from the tensor-info section.

    ``shape`` is as the file stores it and ``gguf`` reports it (GGML order: ``ne[0]``, the
    fastest-varying dimension, first; ``ffn_gate_exps`` of a MoE model is
    ``[n_embd, n_ff_exp, n_expert]``). ``type`` is the GGML type name (``F32``, ``Q4_K``,
    ``type<N>`` for one this gguf package does not know); ``offset`` is relative to the
    tensor data section and is never followed. A named tuple: a model has thousands."""

    name: str
    shape: tuple[int, ...]
    type: str
    offset: int

    def to_json(self) -> dict[str, Any]:
        """``{"name", "shape", "type", "offset"}``."""
        return {"name": self.name, "shape": list(self.shape), "type": self.type, "offset": self.offset}


@dataclass(frozen=True, eq=False)
class ModelIdentity:
    """What a probe sees of a model file (seed 002 section 4: the artifact identity).

    ``architecture``: ``general.architecture`` when it is a string, else None.
    ``metadata``: key -> value (``int``, ``float``, ``bool``, ``str`` or :class:`ArrayValue`),
    in file order, with ``metadata_types`` key -> GGUF type name (``uint32``, ``string`` ...).
    ``tensors``: every :class:`TensorInfo`, in file order. ``path``: the file as given;
    ``format``: ``"gguf"``; ``version``: the GGUF version; ``header_bytes``: where the
    tensor-info section ends (bytes read at most, rounded up to the read window)."""

    architecture: str | None
    metadata: Mapping[str, Any]
    tensors: tuple[TensorInfo, ...]
    path: str = ""
    format: str = "gguf"
    version: int = 3
    metadata_types: Mapping[str, str] = field(default_factory=dict)
    header_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        """JSON shape: ``{"path", "format", "version", "architecture", "metadata": {key:
        {"type", "value"}}, "tensors": [...], "header_bytes"}``; an array's value is
        ``{"element_type", "length"}``; non-finite floats become strings."""
        def value(v: Any) -> Any:
            if isinstance(v, ArrayValue):
                return {"element_type": v.element_type, "length": v.length}
            if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
                return repr(v)
            return v
        return {"path": self.path, "format": self.format, "version": self.version,
                "architecture": self.architecture,
                "metadata": {k: {"type": self.metadata_types.get(k, ""), "value": value(v)}
                             for k, v in self.metadata.items()},
                "tensors": [t.to_json() for t in self.tensors], "header_bytes": self.header_bytes}


class _Window:
    """Reads ``[pos, pos + n)`` of an open file through a window buffer; skips are seeks."""

    def __init__(self, f, size: int, path: str):
        self.f, self.size, self.path = f, size, path
        self.buf, self.start, self.pos, self.high = b"", 0, 0, 0
        self.what = "header"

    def fail(self, message: str) -> ModelFileError:
        return ModelFileError(one_line(f"{self.path}: {message}"))

    def truncated(self, n: int) -> ModelFileError:
        return TruncatedGGUFError(one_line(f"{self.path}: truncated GGUF file: reading {self.what} needs {n} bytes "
                                           f"at offset {self.pos}, the file has {self.size} bytes"))

    def take(self, n: int) -> tuple[bytes, int]:
        """``(buffer, offset in buffer)`` holding the next ``n`` bytes; advances."""
        end = self.pos + n
        if end > self.size:
            raise self.truncated(n)
        off = self.pos - self.start
        if off < 0 or end > self.start + len(self.buf):
            self.f.seek(self.pos)
            want = max(n, _WINDOW, len(self.buf))  # grows with a long header: fewer reads
            self.buf = self.f.read(min(want, self.size - self.pos))
            self.start, off = self.pos, 0
            if len(self.buf) < n:  # the file shrank under us
                raise self.truncated(n)
            self.high = max(self.high, self.start + len(self.buf))
        self.pos = end
        return self.buf, off

    def skip(self, n: int) -> None:
        if self.pos + n > self.size:
            raise self.truncated(n)
        self.pos += n


class _Reader:
    def __init__(self, win: _Window, order: str):
        self.win = win
        self.order = order
        self.u32 = struct.Struct(order + "I")
        self.u64 = struct.Struct(order + "Q")
        self.scalars = {t: struct.Struct(order + code) for t, (code, _) in _SCALARS.items()}

    def unpack(self, s: struct.Struct) -> Any:
        buf, off = self.win.take(s.size)
        return s.unpack_from(buf, off)[0]

    def string(self, limit: int) -> str:
        n = self.unpack(self.u64)
        if n > limit:
            raise self.win.fail(f"{self.win.what}: a string of {n} bytes at offset {self.win.pos - 8} "
                                f"exceeds the {limit}-byte limit")
        buf, off = self.win.take(n)
        return bytes(buf[off:off + n]).decode("utf-8", errors="replace")

    def value(self, vtype: int, depth: int = 0) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string(MAX_STRING)
        if vtype == GGUFValueType.ARRAY:
            return self.array(depth)
        s = self.scalars.get(vtype)
        if s is None:
            raise self.win.fail(f"{self.win.what}: unknown GGUF value type {vtype}")
        v = self.unpack(s)
        return bool(v) if vtype == GGUFValueType.BOOL else v

    def numbers(self) -> tuple[Any, ...] | ArrayValue:
        """A metadata array of numbers read whole (at most :data:`MAX_NUMBERS`); any other
        array summarised as :meth:`array` does."""
        win = self.win
        at = win.pos
        etype = self.unpack(self.u32)
        count = self.unpack(self.u64)
        s = self.scalars.get(etype)
        if s is None or etype == GGUFValueType.BOOL or count > MAX_NUMBERS:
            win.pos = at
            return self.array(0)
        buf, off = win.take(count * s.size)
        return struct.unpack_from(f"{self.order}{count}{s.format[-1]}", buf, off)

    def array(self, depth: int) -> ArrayValue:
        if depth >= MAX_ARRAY_DEPTH:
            raise self.win.fail(f"{self.win.what}: arrays nested deeper than {MAX_ARRAY_DEPTH}")
        etype = self.unpack(self.u32)
        count = self.unpack(self.u64)
        win = self.win
        if etype == GGUFValueType.STRING or etype == GGUFValueType.ARRAY:
            least = 8 if etype == GGUFValueType.STRING else 12
            if count * least > win.size - win.pos:
                raise win.fail(f"{win.what}: an array of {count} {_TYPE_NAMES[etype]} cannot fit in the "
                               f"{win.size - win.pos} bytes left after offset {win.pos}")
            if etype == GGUFValueType.STRING:
                u64 = self.u64
                for _ in range(count):
                    buf, off = win.take(8)
                    win.skip(u64.unpack_from(buf, off)[0])
            else:
                for _ in range(count):
                    self.array(depth + 1)
        elif etype in self.scalars:
            win.skip(count * self.scalars[etype].size)
        else:
            raise win.fail(f"{win.what}: unknown GGUF array element type {etype}")
        return ArrayValue(_TYPE_NAMES[etype], count)


def read_identity(path: str | os.PathLike[str], numbers: Callable[[str], bool] | None = None) -> ModelIdentity:
    """The :class:`ModelIdentity` of the GGUF file at ``path``, reading only its header,
    metadata key/values and tensor-info section (never tensor data: a file whose tensor data
    is absent reads the same). Follows the GGUF spec (ggml docs/gguf.md), versions 2 and 3,
    little- or big-endian.

    Raises :class:`ModelFileError` (exit 1) naming the file: not found, not a regular file,
    unreadable, empty, not GGUF (magic), unsupported version, truncated, duplicate key or
    tensor name, too many dimensions, strings/arrays larger than the limits above, more
    tensors or key/values than :data:`MAX_TENSORS` / :data:`MAX_KV`, more than :data:`MAX_KEPT_BYTES` of names and strings. Memory is bounded by
    those caps, whatever the header declares.

    ``numbers``: a predicate on metadata keys whose numeric arrays are read whole, as a tuple of
    numbers, instead of an :class:`ArrayValue` (per-layer counts, for the memory estimate).
    """
    where = str(path)
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer (no effect on regular files)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ModelFileError(one_line(f"model file not found: {where}")) from None
    except OSError as e:
        raise ModelFileError(one_line(f"{where}: cannot read: {e.strerror or e}")) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ModelFileError(one_line(f"{where}: is a directory, not a GGUF model file"))
        if not stat.S_ISREG(mode):
            raise ModelFileError(one_line(f"{where}: not a regular file, not a GGUF model file"))
    except BaseException:
        os.close(fd)
        raise
    with open(fd, "rb", buffering=0) as f:
        try:
            return _read(_Window(f, os.fstat(fd).st_size, where), numbers)
        except OSError as e:
            raise ModelFileError(one_line(f"{where}: cannot read: {e.strerror or e}")) from None


def _read(win: _Window, numbers: Callable[[str], bool] | None = None) -> ModelIdentity:
    if win.size < 4:
        raise win.fail(f"not a GGUF file ({'empty' if win.size == 0 else f'{win.size} bytes'}; "
                       "a GGUF file starts with the magic bytes 'GGUF')")
    buf, off = win.take(4)
    magic = bytes(buf[off:off + 4])
    if struct.unpack("<I", magic)[0] != GGUF_MAGIC:
        raise win.fail(f"not a GGUF file (starts with {magic!r}, not b'GGUF')")
    win.what = "the GGUF version"
    buf, off = win.take(4)
    order = "<"
    version = struct.unpack_from("<I", buf, off)[0]
    if version & 0xFFFF == 0 and version:  # written on a big-endian host
        order, version = ">", struct.unpack_from(">I", buf, off)[0]
    if version not in SUPPORTED_VERSIONS:
        raise win.fail(f"GGUF version {version} is not supported (supported: "
                       f"{', '.join(map(str, SUPPORTED_VERSIONS))})")
    r = _Reader(win, order)
    win.what = "the tensor and key/value counts"
    n_tensors = r.unpack(r.u64)
    n_kv = r.unpack(r.u64)
    for count, cap, what in ((n_tensors, MAX_TENSORS, "tensors"), (n_kv, MAX_KV, "metadata key/values")):
        if count > cap:  # each entry read is kept: the caps bound memory (a truncated file fails on reading)
            raise win.fail(f"the header declares {count} {what}; at most {cap} are read (a real model has far "
                           "fewer): not probing a file whose header would not fit in bounded memory")
    kept = 0
    metadata: dict[str, Any] = {}
    types: dict[str, str] = {}
    for i in range(n_kv):
        win.what = f"key/value {i + 1} of {n_kv}"
        key = r.string(MAX_NAME)
        win.what = f"key/value {i + 1} of {n_kv} ({key})"
        vtype = r.unpack(r.u32)
        if key in metadata:
            raise win.fail(f"duplicate metadata key {key!r} (key/value {i + 1} of {n_kv})")
        if numbers is not None and vtype == GGUFValueType.ARRAY and numbers(key):
            value = metadata[key] = r.numbers()
        else:
            value = metadata[key] = r.value(vtype)
        types[key] = _TYPE_NAMES.get(vtype, str(vtype))
        kept += len(key) + (len(value) if isinstance(value, str) else 0)
        if kept > MAX_KEPT_BYTES:
            raise win.fail(f"{win.what}: the header's names and strings exceed {MAX_KEPT_BYTES} bytes")
    tensors: list[TensorInfo] = []
    append, make, types_get = tensors.append, TensorInfo._make, _GGML_TYPES.get
    u64, u32 = r.u64.unpack_from, r.u32.unpack_from
    # per dimension count: the dimensions, the GGML type and the data offset in one unpack
    rest = [struct.Struct(f"{order}{k}QIQ").unpack_from for k in range(MAX_DIMS + 1)]
    buf, start = win.buf, win.start
    p = win.pos - start
    for i in range(n_tensors):
        # fast path: the whole entry is in the window (a tight loop: thousands per file)
        if 0 <= p and p + 8 <= len(buf):
            n = u64(buf, p)[0]
            q = p + 8 + n
            if n <= MAX_NAME and q + 4 <= len(buf):
                nd = u32(buf, q)[0]
                e = q + 16 + 8 * nd
                if nd <= MAX_DIMS and e <= len(buf):
                    *shape, ttype, offset = rest[nd](buf, q + 4)
                    append(make((buf[p + 8:q].decode("utf-8", "replace"), tuple(shape),
                                 types_get(ttype) or f"type{ttype}", offset)))
                    kept += n
                    p = e
                    if kept <= MAX_KEPT_BYTES:
                        continue
                    win.pos = start + p
                    raise win.fail(f"tensor info {i + 1} of {n_tensors}: the header's names and strings exceed "
                                   f"{MAX_KEPT_BYTES} bytes")
        # slow path: exact reads that refill the window, and the errors
        win.pos = start + p
        win.what = f"tensor info {i + 1} of {n_tensors}"
        name = r.string(MAX_NAME)
        win.what = f"tensor info {i + 1} of {n_tensors} ({name})"
        nd = r.unpack(r.u32)
        if nd > MAX_DIMS:
            raise win.fail(f"tensor {name!r} has {nd} dimensions (at most {MAX_DIMS})")
        b, off = win.take(8 * nd + 12)
        *shape, ttype, offset = rest[nd](b, off)
        append(TensorInfo(name, tuple(shape), types_get(ttype) or f"type{ttype}", offset))
        kept += len(name)
        if kept > MAX_KEPT_BYTES:
            raise win.fail(f"{win.what}: the header's names and strings exceed {MAX_KEPT_BYTES} bytes")
        buf, start = win.buf, win.start
        p = win.pos - start
    win.pos = start + p
    if len({t.name for t in tensors}) != len(tensors):
        seen: set[str] = set()
        for i, t in enumerate(tensors):
            if t.name in seen:
                raise win.fail(f"duplicate tensor name {t.name!r} (tensor info {i + 1} of {n_tensors})")
            seen.add(t.name)
    arch = metadata.get("general.architecture")
    return ModelIdentity(architecture=arch if isinstance(arch, str) else None, metadata=metadata,
                         tensors=tuple(tensors), path=win.path, format="gguf", version=version,
                         metadata_types=types, header_bytes=win.pos)


__all__ = [
    "ArrayValue", "MAX_TENSORS", "ModelFileError", "ModelIdentity", "TensorInfo", "TruncatedGGUFError",
    "read_identity",
]
