"""JSON paths for messages: ``platforms.linux.rocm.args[7]`` (dotted keys, ``[i]``
indices, ``["odd.key"]`` for keys that are not plain words or globs, the key written
as a JSON string so a newline or quote in it stays escaped on one line).

Below every room (stdlib only): the contract's loader and rules, the pinning policy in
``oci`` and the runtime's model registry all name fields the same way."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

_PLAIN = re.compile(r"[A-Za-z0-9_*?!\[\]-]+")


def join(parts: Iterable[str | int]) -> str:
    """Render a sequence of keys and indices as a JSON path (``""`` for the root);
    ``join(["platforms", "linux", "a.b", 0])`` is ``platforms.linux["a.b"][0]``."""
    out: list[str] = []
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _PLAIN.fullmatch(part) and not part.startswith("["):
            out.append(f".{part}" if out else part)
        else:
            out.append(f"[{json.dumps(part, ensure_ascii=False)}]")
    return "".join(out)
