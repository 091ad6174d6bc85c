"""JSON paths for messages: ``platforms.linux.rocm.args[7]`` (dotted keys, ``[i]``
indices, ``["odd.key"]`` for keys that are not plain words or globs, the key written
as a JSON string so a newline or quote in it stays escaped on one line)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from functools import lru_cache

_PLAIN = re.compile(r"[A-Za-z0-9_*?!\[\]-]+")


@lru_cache(maxsize=4096)
def _key(part: str) -> tuple[str, str]:
    """(text after a parent, text at the root) of one key."""
    if _PLAIN.fullmatch(part) and not part.startswith("["):
        return f".{part}", part
    quoted = f"[{json.dumps(part, ensure_ascii=False)}]"
    return quoted, quoted


def join(parts: Iterable[str | int]) -> str:
    """Render a sequence of keys and indices as a JSON path (``""`` for the root)."""
    out = []
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        else:
            nested, root = _key(part) if len(part) <= 256 else _key.__wrapped__(part)
            out.append(nested if out else root)
    return "".join(out)
