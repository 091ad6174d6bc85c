"""The index of the official entries, shipped in the package: what ``catalogue search`` and
``catalogue show`` read before any ``catalogue update`` (as ``brew search`` works before
``brew update``).

``lemonpack/catalogue/shipped/catalogue.json`` is the index (schema 1, canonical JSON) of the
official entries only: the recipes of ``lemonpack/examples`` and ``catalogue/recipes``, and the
extensions of ``extensions.lock``, described by the same code as ``catalogue build``
(:func:`lemonpack.catalogue.build.official_entries`). It is not signed: its entries carry the
trust of the installed package they come with (signature status ``in-tree``; readers show the
digest of the file they read). ``catalogue update`` replaces it with a fetched, signed index in
the cache, which is read from then on (:func:`lemonpack.catalogue.index.locate`).

Regenerate it from a source tree with ``python -m lemonpack.catalogue.official [--source TOP]``
(``--check`` exits 1 when the shipped file differs, ignoring ``generated``); a test runs the
check, so the shipped index stays what the tree describes.
"""

from __future__ import annotations

import json
import sys
import tempfile
from importlib import resources
from pathlib import Path

SHIPPED = Path(str(resources.files("lemonpack.catalogue"))) / "shipped" / "catalogue.json"


def official_index(source: Path, epoch: int, previous: dict | None = None) -> dict:
    """The index (a dict, ``catalogue.json``'s shape) of the official entries of the source
    tree ``source``, dated ``epoch``, each entry's ``history`` carried from ``previous`` (the
    shipped index: :func:`lemonpack.catalogue.history.carry_history`). Raises LemonpackError for
    a tree without ``catalogue/``."""
    from lemonpack.catalogue.build import SCHEMA, BuildConfig, _Context, official_entries, rfc3339
    from lemonpack.catalogue.history import carry_history

    cfg = BuildConfig(out=Path(source) / "unused", source=Path(source), epoch=epoch)
    ctx = _Context(cfg)
    with tempfile.TemporaryDirectory(prefix="lemonpack-official-") as tmp:
        entries, rejected = official_entries(ctx, Path(tmp))
    pubs = {k: v for k, v in ctx.sources.publishers.items() if k == "lemonpack"}
    entries.sort(key=lambda e: e["id"])
    index = {"schema": SCHEMA, "generated": rfc3339(epoch), "publishers": [p.to_json() for p in pubs.values()],
             "entries": entries, "rejected": rejected}
    carry_history(index, previous)
    return index


def _comparable(index: dict) -> dict:
    return {k: v for k, v in index.items() if k != "generated"}


def main(argv: list[str] | None = None) -> int:
    """``python -m lemonpack.catalogue.official [--source TOP] [--check]``."""
    import argparse

    from lemonpack.catalogue.dates import source_epoch
    from lemonpack.canonical import canonical_json

    ap = argparse.ArgumentParser(prog="python -m lemonpack.catalogue.official",
                                 description="Write (or --check) the shipped index of official entries.")
    ap.add_argument("--source", type=Path, default=Path("."), help="repository top (default: .)")
    ap.add_argument("--check", action="store_true", help="exit 1 when the shipped index is out of date")
    a = ap.parse_args(argv)
    shipped = json.loads(SHIPPED.read_bytes()) if SHIPPED.is_file() else {}
    index = official_index(a.source, source_epoch(a.source), shipped)
    if a.check:
        if _comparable(shipped) != _comparable(index):
            print(f"{SHIPPED} is out of date: run python -m lemonpack.catalogue.official", file=sys.stderr)
            return 1
        print(f"{SHIPPED}: up to date ({len(index['entries'])} entries)")
        return 0
    from lemonpack.files import replace_file

    SHIPPED.parent.mkdir(parents=True, exist_ok=True)
    replace_file(SHIPPED, canonical_json(index))
    print(f"{SHIPPED}: {len(index['entries'])} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
