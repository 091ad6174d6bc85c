"""Canonical JSON: the one encoder whose bytes lemonpack hashes.

Sorted keys, separators ``(",", ":")``, UTF-8 with non-ASCII characters kept as they are
(``ensure_ascii=False``), no trailing newline, NaN and infinities refused: the encoding OCI
image-spec v1.1 recommends for reproducible content (``considerations.md``,
"Canonicalization"). The float rule is explicit, because floats are where encoders disagree:

- ``floats="refuse"`` (the default): a float anywhere is a ``TypeError``. Used for everything
  put into an OCI layout or a catalogue index, whose digests other tools recompute.
- ``floats="shortest"``: floats are written in Python's shortest round-trip form
  (``repr``: ``0.5``, ``1e-07``), which is stable for one value. Used for a recipe's identity
  (``Recipe.canonical``), since recipes may hold numbers like ``timeout_seconds: 0.5``.

Format-specific encoders stay with their format (cosign's Go-style payload in
``signing/simplesigning.py``, Nix ``builtins.toJSON``'s ASCII form in ``extensions/generate.py``).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

#: Where a float can be in compact JSON: after ``:``, ``[`` or ``,``, a number with a fraction
#: or an exponent (``repr`` of a float always has one), before ``,``, ``]`` or ``}``.
_FLOAT_TOKEN = re.compile(rb"[:\[,]-?[0-9]+(?:\.[0-9]+(?:[eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+)[,\]}]")


def canonical_json(obj: Any, *, floats: Literal["refuse", "shortest"] = "refuse") -> bytes:
    """Encode ``obj`` (dict, list, str, int, bool, None; floats per ``floats``) as canonical
    JSON bytes. Raises ``TypeError`` for a float under ``floats="refuse"`` or a value JSON
    cannot hold, ``ValueError`` for NaN or an infinity."""
    if floats == "refuse":
        _refuse_floats(obj)
    elif floats != "shortest":
        raise ValueError(f"floats must be 'refuse' or 'shortest', not {floats!r}")
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def refuse_floats_in(data: bytes, obj: Any) -> None:
    """Raise ``TypeError`` when ``obj``, whose compact JSON encoding is ``data``, holds a float
    (as ``canonical_json`` does), without walking ``obj`` unless ``data`` has something that
    may be one (a float's encoding always matches :data:`_FLOAT_TOKEN`; text inside a string
    may too, then ``obj`` is walked)."""
    if isinstance(obj, float) or _FLOAT_TOKEN.search(data):
        _refuse_floats(obj)


def _refuse_floats(obj: Any) -> None:
    stack = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, float):
            raise TypeError(f"floats are not allowed in canonical JSON: {value!r}")
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)


__all__ = ["canonical_json", "refuse_floats_in"]
