"""Each entry's versions with their dates (docs/catalogue.md, "Versions, dates and order"):
carried from the index the last build wrote into the same output directory, extended when an
entry's digest changed (:func:`carry_history`). The previous index is read from the memo's view
of it when its bytes are the ones the memo saw, else parsed with each entry cut to what the
carry reads (:func:`_previous_index`).
"""

from __future__ import annotations

import json
from pathlib import Path

from lemonpack.catalogue.names import SCHEMA
from lemonpack.digest import Digest


#: Versions kept per entry in ``history`` (the oldest dropped first).
MAX_HISTORY = 50


def _previous_index(path: Path, memo=None) -> dict | None:
    """The index an earlier build wrote at ``path`` (the output directory's ``catalogue.json``),
    or None when there is none or it is not an index of this schema (then history starts over).
    ``memo``: when it remembers what the carry reads of the index with these very bytes
    (:meth:`lemonpack.catalogue.memo.Memo.previous_index`), that is returned instead of the
    file parsed again."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if memo is not None:
        view = memo.previous_index(Digest.of_bytes(data).hex)
        if view is not None:
            return view
    try:  # each entry cut to what the carry reads as soon as it is parsed: no second full index
        doc = json.loads(data, object_hook=_carried)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("entries"), list):
        return None
    return doc


def _carried(obj: dict) -> dict:
    """``json.loads`` object hook: an entry (an object with an ``id`` and a ``digest``) cut to
    the fields :func:`carry_history` reads; any other object as it is."""
    if "id" in obj and "digest" in obj:
        return {k: obj[k] for k in ("id", "digest", "version", "history") if k in obj}
    return obj


def carry_history(index: dict, previous: dict | None) -> None:
    """Give every entry of ``index`` its ``history``: the versions it had, oldest first, each
    ``{"version", "digest", "date"}`` (``date``: the ``generated`` date of the first index that
    held that digest), carried from ``previous`` (the index the last build wrote) and extended
    with the entry's current digest when it changed; an entry ``previous`` lacks starts with
    its current version dated ``index["generated"]``. At most :data:`MAX_HISTORY` versions.
    Deterministic: the same index and previous index give the same history. Raises nothing."""
    old = {e.get("id"): e for e in (previous or {}).get("entries", []) if isinstance(e, dict)}
    for e in index["entries"]:
        prev = old.get(e["id"])
        hist: list = []
        if prev is not None:
            hist = [h for h in prev.get("history") or [] if isinstance(h, dict) and isinstance(h.get("digest"), str)]
            if not hist and isinstance(prev.get("digest"), str):
                hist = [{"version": prev.get("version"), "digest": prev["digest"],
                         "date": (previous or {}).get("generated")}]
        if not hist or hist[-1]["digest"] != e["digest"]:
            hist.append({"version": e.get("version"), "digest": e["digest"], "date": index["generated"]})
        e["history"] = [{"version": h.get("version"), "digest": h["digest"], "date": h.get("date")}
                        for h in hist[-MAX_HISTORY:]]
