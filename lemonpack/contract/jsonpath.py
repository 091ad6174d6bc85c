"""JSON paths for messages: ``platforms.linux.rocm.args[7]`` (dotted keys, ``[i]``
indices, ``["odd.key"]`` for keys that are not plain words or globs, the key written
as a JSON string so a newline or quote in it stays escaped on one line)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

_PLAIN = re.compile(r"[A-Za-z0-9_*?!\[\]-]+")


def join(parts: Iterable[str | int]) -> str:
    """Render a sequence of keys and indices as a JSON path (``""`` for the root)."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN.fullmatch(part) and not part.startswith("["):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out
