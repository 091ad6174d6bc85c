"""The shared corpus of good and bad extensions (``tests/extensions/corpus/``): what the CLI
(``lemonpack extensions check``) says about each entry, for the CLI's test and the Nix
library's test alike. The format is in ``tests/extensions/corpus/README.md``.

``entries()`` lists the entries; ``materialize(slug, dest)`` copies one under ``dest`` and
applies its ``setup`` (what git does not hold well: fifos, symlinks, invalid UTF-8, large
files), returning the entry's root; ``verdict_problems(expected, exit_code, selected,
rejected, root)`` compares a run with the expected verdict."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "extensions" / "corpus"


def entries() -> list[str]:
    """The corpus entries (directory names), sorted."""
    return sorted(p.name for p in CORPUS.iterdir() if (p / "expected.json").is_file())


def expected(slug: str) -> dict:
    """The entry's ``expected.json``."""
    return json.loads((CORPUS / slug / "expected.json").read_text())


def materialize(slug: str, dest: Path) -> Path:
    """Copy entry ``slug`` to ``dest/slug`` and apply its setup steps in order; return it."""
    root = Path(dest) / slug
    shutil.copytree(CORPUS / slug, root, symlinks=True)
    for step in expected(slug).get("setup", []):
        if "symlink" in step:
            os.symlink(step["to"], root / step["symlink"])
        elif "mkdir" in step:
            (root / step["mkdir"]).mkdir(parents=True, exist_ok=True)
        elif "fifo" in step:
            os.mkfifo(root / step["fifo"])
        elif "write" in step:
            data = bytes.fromhex(step["hex"]) if "hex" in step else step["text"].encode()
            if "pad_to" in step:
                data += b" " * (step["pad_to"] - len(data))
            (root / step["write"]).write_bytes(data)
        else:
            raise ValueError(f"{slug}: unknown setup step {step}")
    return root


def verdict_problems(want: dict, exit_code: int, selected: list[str], rejected: dict[str, list[str]],
                     root: Path) -> list[str]:
    """How a run differs from ``want`` (empty: it agrees). ``selected``: the extension names
    the run selected; ``rejected``: manifest path -> reasons. Each expected rejected manifest
    (relative to ``root``) must be rejected with every expected fragment in one of its
    reasons (``<root>/`` in a fragment or reason is written relative); no other manifest of
    the entry may be rejected; every expected name must be selected."""
    out = []
    if exit_code != want["exit"]:
        out.append(f"exit {exit_code}, expected {want['exit']}")
    mine = {os.path.relpath(m, root): [r.replace(f"{root}/", "") for r in reasons]
            for m, reasons in rejected.items() if os.path.abspath(m).startswith(f"{root}/")}
    for manifest, fragments in want["rejected"].items():
        if manifest not in mine:
            out.append(f"{manifest} is not rejected (rejected: {sorted(mine) or 'none'})")
            continue
        for fragment in fragments:
            if not any(fragment in r for r in mine[manifest]):
                out.append(f"{manifest}: no reason holds {fragment!r} (reasons: {mine[manifest]})")
    out += [f"{m} is rejected unexpectedly: {r}" for m, r in mine.items() if m not in want["rejected"]]
    out += [f"{n} is not selected" for n in want["selected"] if n not in selected]
    return out


__all__ = ["CORPUS", "entries", "expected", "materialize", "verdict_problems"]
