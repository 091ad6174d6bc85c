"""``{custom_args}`` (RFC sections 4.2, 4.3): a user's extra engine arguments, split into argv
elements and refused when one overrides a reserved flag under any spelling the engine reads.

Pure. The reserved flags come from the manifest (``reserved_args``) and, for a ``variant_of``
recipe, from the built-in's plan (:mod:`lemonpack.runtime.launch.builtin`); the spellings from
the engine's own option table (:mod:`lemonpack.runtime.launch.engine_flags`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from lemonpack.errors import TokenError
from lemonpack.runtime.launch.engine_flags import EngineFlagTable


def split_custom_args(value: str | Sequence[str] | None) -> list[str]:
    """``custom_args`` as argv elements: None -> ``[]``; a list of strings as is; a string
    holding a JSON array of strings -> that array; any other string -> :func:`shlex.split`.
    Raises :class:`TokenError` on unbalanced quotes or non-string elements (section 4.2)."""
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError:
                parsed = None
            if isinstance(parsed, list):
                value = parsed
        if isinstance(value, str):
            try:
                return shlex.split(value)
            except ValueError as e:
                raise TokenError(f"custom_args {value!r} cannot be split: {e}") from None
    items = list(value)
    bad = [v for v in items if not isinstance(v, str)]
    if bad:
        raise TokenError(f"custom_args elements must be strings, got {bad!r}")
    return items


def check_reserved(args: Sequence[str], reserved: Sequence[str], flags: EngineFlagTable | None = None) -> None:
    """Reject a user argument that overrides a reserved flag (section 4.3): an exact match
    or a leading ``<flag>=``; with ``flags`` (the engine's option table,
    :mod:`lemonpack.runtime.launch.engine_flags`) also any other spelling the engine reads as the
    flag (aliases, negations, ``_`` for ``-``) and any option setting what the flag sets.
    Raises :class:`TokenError` naming the argument, the reserved flag and the relation."""
    for arg in args:
        if flags is not None:
            hit = flags.conflict(arg, reserved)
            if hit is not None:
                why = "" if arg.split("=", 1)[0] == hit.reserved else f": {arg.split('=', 1)[0]!r} is {hit.how}"
                raise TokenError(f"custom_args element {arg!r} overrides the reserved flag {hit.reserved!r}{why}")
            continue
        for flag in reserved:
            if arg == flag or arg.startswith(flag + "="):
                raise TokenError(f"custom_args element {arg!r} overrides the reserved flag {flag!r}")


def expand_custom_args(custom_args: str | Sequence[str] | None, reserved: Sequence[str] = (),
                       flags: EngineFlagTable | None = None) -> list[str]:
    """``{custom_args}``: :func:`split_custom_args` of ``custom_args`` (the load's value: a string
    or a list), each element checked against the ``reserved`` flags under ``flags``
    (:func:`check_reserved`). Raises :class:`TokenError`."""
    args = split_custom_args(custom_args)
    check_reserved(args, reserved, flags)
    return args


__all__ = ["check_reserved", "expand_custom_args", "split_custom_args"]
