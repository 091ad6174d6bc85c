#!/usr/bin/env python3
"""Maintainers' lock commands: re-pin what the shipped package verifies, in this source tree.

These write into the repository (the schema locks under ``lemonpack/``, ``api/changes.lock.json``),
so they are not commands of the installed ``lemonpack`` (whose users only check: ``lemonpack
schema check``, ``lemonpack extensions check``). Run from a clone, after review:

    python3 scripts/locks.py recipe-schema --reason "what changed and why"
    python3 scripts/locks.py extension-schema --reason "what changed and why"
    python3 scripts/locks.py extension-api            # after adding api/changes/NNNN-<slug>.md

Exit 0 with the new lock's summary; exit 1 with one line per problem (a released schema
changed, a change record edited, the interface changed without a record ...).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TREE))  # this tree's lemonpack, whatever is installed

from lemonpack.errors import LemonpackError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run one lock command; returns the exit code."""
    ap = argparse.ArgumentParser(prog="scripts/locks.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    for name, text in (("recipe-schema", "re-pin the unreleased recipe schema majors"),
                       ("extension-schema", "re-pin the extension.json schema")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--reason", help="why the schema changed (recorded in the lock's history)")
    p = sub.add_parser("extension-api", help="re-pin api/changes.lock.json after adding a change record")
    p.add_argument("--tree", type=Path, default=TREE, help="source tree (default: this clone)")
    a = ap.parse_args(argv)
    try:
        if a.what == "recipe-schema":
            from lemonpack.contract.schemalock import refresh_lock

            for major, entry in sorted(refresh_lock(reason=a.reason)["majors"].items()):
                print(f"recipe schema major {major}: {entry['sha256']} ({'released' if entry['released'] else 'unreleased'})")
        elif a.what == "extension-schema":
            from lemonpack.extensions.manifest import refresh_schema_lock

            for major, entry in sorted(refresh_schema_lock(a.reason)["majors"].items()):
                print(f"extension schema {major}: {entry['sha256']}")
        else:
            from lemonpack.extensions.apilock import refresh_api_lock

            doc = refresh_api_lock(a.tree)
            print(f"extension API revision {doc['revision']}: {len(doc['interface'])} interface files locked")
    except LemonpackError as e:
        print(f"scripts/locks.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
