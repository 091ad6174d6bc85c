"""The extension API's change records and their lock (seed 002 section 7).

The host API version is ``0.MINOR.REVISION``: MINOR from ``api/minor``, REVISION the number
of change records ``api/changes/NNNN-<slug>.md`` (numbered 0001, 0002, ... without gaps).
Records are append-only and every change to the public interface needs a new one.
``api/changes.lock.json`` makes both checkable:

    {"revision": N,
     "records": {"NNNN-<slug>.md": "<sha256 of the file's bytes>", ...},
     "interface": {"include/gufo/ext/registry.hpp": "<sha256>", ...}}

The interface is :data:`INTERFACE_GLOBS` (paths relative to the tree): the manifest schema
(hashed as canonical JSON, like the recipe schema lock), the public headers under
``include/gufo/ext/`` and the generator's fixed text :mod:`lemonpack.extensions.templates`.
:func:`check_api_lock` reports an edited, removed, misnumbered or unlocked record, and an
interface that changed since the lock without a new record. :func:`refresh_api_lock`
(``python3 scripts/locks.py extension-api``, a maintainer's script) re-pins, refusing when a record was edited or removed,
or when the interface changed and no record was added since the last lock.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from lemonpack.files import replace_file
from lemonpack.contract.schemalock import canonical_sha256
from lemonpack.errors import LockError

LOCK_PATH = Path("api") / "changes.lock.json"
CHANGES_DIR = Path("api") / "changes"
#: What counts as the public extension interface (relative to the tree).
INTERFACE_GLOBS = ("lemonpack/extensions/schema/extension-v*.schema.json", "include/gufo/ext/**/*.hpp",
                   "lemonpack/extensions/templates.py")
_RECORD = re.compile(r"(\d{4})-[a-z0-9][a-z0-9-]*\.md\Z")


def _sha(path: Path) -> str:
    if path.name.endswith(".schema.json"):
        return canonical_sha256(path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def records(tree: Path) -> dict[str, str]:
    """``{record file name: sha256}`` of every ``*.md`` in ``api/changes/``, sorted."""
    d = Path(tree) / CHANGES_DIR
    return {p.name: _sha(p) for p in sorted(d.glob("*.md"))} if d.is_dir() else {}


def interface(tree: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every interface file (:data:`INTERFACE_GLOBS`), sorted."""
    tree = Path(tree)
    files = sorted({p for g in INTERFACE_GLOBS for p in tree.glob(g) if p.is_file()})
    return {p.relative_to(tree).as_posix(): _sha(p) for p in files}


def read_api_lock(tree: Path) -> dict[str, Any]:
    """The lock document (empty shape when the file does not exist)."""
    path = Path(tree) / LOCK_PATH
    if not path.exists():
        return {"revision": 0, "records": {}, "interface": {}}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise LockError(f"{path}: not a readable JSON lock ({e})") from None


def _record_problems(tree: Path, locked: dict[str, str], actual: dict[str, str]) -> tuple[list[str], list[str]]:
    """(problems with existing records, names of records not yet locked)."""
    out = []
    for i, name in enumerate(actual, 1):
        m = _RECORD.match(name)
        if not m:
            out.append(f"{CHANGES_DIR / name}: a change record is named NNNN-<slug>.md (lowercase slug)")
        elif int(m.group(1)) != i:
            out.append(f"{CHANGES_DIR / name}: records are numbered 0001, 0002, ... without gaps; expected {i:04d}")
    for name, sha in locked.items():
        if name not in actual:
            out.append(f"{CHANGES_DIR / name} was removed; change records are append-only: restore it")
        elif actual[name] != sha:
            out.append(f"{CHANGES_DIR / name} was edited after it was recorded (sha256 {actual[name]} != locked "
                       f"{sha}); change records are append-only: restore it and add a new record")
    return out, [n for n in actual if n not in locked]


def _interface_changes(locked: dict[str, str], actual: dict[str, str]) -> list[str]:
    out = []
    for path in sorted(set(locked) | set(actual)):
        if path not in actual:
            out.append(f"{path} was removed")
        elif path not in locked:
            out.append(f"{path} was added")
        elif locked[path] != actual[path]:
            out.append(f"{path} changed")
    return out


def check_api_lock(tree: Path) -> list[str]:
    """Every way the change records and the interface disagree with the lock, as sentences
    (empty: OK). This is what the change-record test and ``lemonpack extensions check`` run."""
    tree = Path(tree)
    lock = read_api_lock(tree)
    actual = records(tree)
    problems, new = _record_problems(tree, lock.get("records", {}), actual)
    for name in new:
        problems.append(f"{CHANGES_DIR / name} is not in {LOCK_PATH}: run 'python3 scripts/locks.py extension-api'")
    changes = _interface_changes(lock.get("interface", {}), interface(tree))
    if changes:
        rev = lock.get("revision", 0)
        problems.append(f"the public extension interface changed since API revision {rev} was recorded "
                        f"({'; '.join(changes)}): add a change record {CHANGES_DIR}/{len(actual) + (0 if new else 1):04d}-<slug>.md "
                        "saying what changed, then run 'python3 scripts/locks.py extension-api'")
    return problems


def refresh_api_lock(tree: Path) -> dict[str, Any]:
    """Re-pin records and interface into ``api/changes.lock.json`` (atomic write) and return
    the new lock. Raises :class:`~lemonpack.errors.LemonpackError` when a locked record was
    edited or removed, a record is misnamed, or the interface changed without a new record."""
    tree = Path(tree)
    lock = read_api_lock(tree)
    actual = records(tree)
    problems, new = _record_problems(tree, lock.get("records", {}), actual)
    if problems:
        raise LockError("\n".join(problems))
    current = interface(tree)
    changes = _interface_changes(lock.get("interface", {}), current)
    if changes and not new:
        raise LockError(f"the public extension interface changed ({'; '.join(changes)}) but no change record "
                        f"was added: write {CHANGES_DIR}/{len(actual) + 1:04d}-<slug>.md first")
    doc = {"revision": len(actual), "records": actual, "interface": current}
    path = tree / LOCK_PATH
    replace_file(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    return doc


__all__ = ["CHANGES_DIR", "INTERFACE_GLOBS", "LOCK_PATH", "check_api_lock", "interface", "records",
           "refresh_api_lock"]
