"""The memory budget ``lemonpack serve`` admits models against.

:func:`default_budget` is the host's available RAM (``MemAvailable`` of ``/proc/meminfo``,
proc(5)) minus :data:`HEADROOM`; :func:`parse_size` reads ``24GiB`` / ``512MiB`` / ``1000000``
(``--memory-budget``). What a model needs is :mod:`lemonpack.runtime.models.memory`'s estimate.
"""

from __future__ import annotations

import re

from lemonpack.errors import InputError

#: Kept free of the host's available RAM by the default budget (OS, serve itself, compute buffers).
HEADROOM = 1 << 30

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 1 << 10, "m": 10**6, "mb": 10**6, "mib": 1 << 20,
          "g": 10**9, "gb": 10**9, "gib": 1 << 30, "t": 10**12, "tb": 10**12, "tib": 1 << 40}


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


__all__ = ["HEADROOM", "available_ram", "default_budget", "parse_size"]
