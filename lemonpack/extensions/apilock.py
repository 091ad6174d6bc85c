"""The extension API's change records and their lock (seed 002 section 7).

The host API version is ``0.MINOR.REVISION``: MINOR from ``api/minor``, REVISION the number
of change records ``api/changes/NNNN-<slug>.md`` (numbered 0001, 0002, ... without gaps,
:data:`RECORD_NAME`). Only a file of that name is a record: a ``README.md`` or any other file
in ``api/changes/`` does not count (one whose name starts with a digit but is not a record's
is reported by the check, since it looks like a misnamed record). Records are append-only and
every change to the public interface needs a new one. ``api/changes.lock.json`` makes both
checkable:

    {"revision": N,
     "records": {"NNNN-<slug>.md": "<sha256 of the file's bytes>", ...},
     "interface": {"include/gufo/ext/registry.hpp": "<sha256>", ...}}

The interface is :data:`INTERFACE_GLOBS` (paths relative to the tree): the manifest schema
(hashed as canonical JSON, like the recipe schema lock), the public headers under
``include/gufo/ext/`` and the generator's fixed text :mod:`lemonpack.extensions.templates`.
:func:`check_api_lock` reports an edited, removed, misnumbered or unlocked record, and an
interface that changed since the lock without a new record; :func:`record_problems` only the
former, the part every build step checks (``lemonpack extensions generate``/``build``, hence
the Nix package, through :func:`require_record_lock`): the revision a build derives is then the
locked one, never one a removed, edited or unlocked record makes up. :func:`refresh_api_lock`
(``python3 scripts/locks.py extension-api``, a maintainer's script) re-pins, refusing when a record was edited or removed,
or when the interface changed and no record was added since the last lock.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from lemonpack.digest import Digest
from lemonpack.files import replace_file
from lemonpack.contract.schemalock import canonical_sha256
from lemonpack.errors import LockError

LOCK_PATH = Path("api") / "changes.lock.json"
CHANGES_DIR = Path("api") / "changes"
#: What counts as the public extension interface (relative to the tree).
INTERFACE_GLOBS = ("lemonpack/extensions/schema/extension-v*.schema.json", "include/gufo/ext/**/*.hpp",
                   "lemonpack/extensions/templates.py")
#: A change record's file name: four digits, ``-``, a lowercase slug, ``.md``.
RECORD_NAME = re.compile(r"(\d{4})-[a-z0-9][a-z0-9-]*\.md\Z")
#: A name that looks like a record's (a leading digit, ``.md``) but may not be one.
_RECORD_LIKE = re.compile(r"\d.*\.md\Z", re.IGNORECASE | re.DOTALL)


def _sha(path: Path) -> str:
    if path.name.endswith(".schema.json"):
        return canonical_sha256(path)
    return Digest.of_bytes(path.read_bytes()).hex


def record_names(tree: Path) -> list[str]:
    """The change records of ``tree``: the names in ``api/changes/`` matching
    :data:`RECORD_NAME`, sorted (empty when the directory does not exist). What the API
    revision counts (:func:`lemonpack.extensions.pipeline.host_api`)."""
    d = Path(tree) / CHANGES_DIR
    try:
        names = os.listdir(d)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(n for n in names if RECORD_NAME.match(n))


def _misnamed(tree: Path) -> list[str]:
    """Names in ``api/changes/`` that look like records (:data:`_RECORD_LIKE`) but are not."""
    d = Path(tree) / CHANGES_DIR
    try:
        names = os.listdir(d)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(n for n in names if _RECORD_LIKE.match(n) and not RECORD_NAME.match(n))


def records(tree: Path) -> dict[str, str]:
    """``{record file name: sha256}`` of every change record (:func:`record_names`), sorted."""
    d = Path(tree) / CHANGES_DIR
    return {n: _sha(d / n) for n in record_names(tree)}


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
    out = [f"{CHANGES_DIR / name}: a change record is named NNNN-<slug>.md (four digits, a lowercase slug); "
           "this file does not count as one" for name in _misnamed(tree)]
    for i, name in enumerate(actual, 1):
        m = RECORD_NAME.match(name)
        assert m is not None, "records() holds record names only"
        if int(m.group(1)) != i:
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


def record_problems(tree: Path) -> list[str]:
    """Every way the change records disagree with ``api/changes.lock.json``, as sentences
    (empty: OK): a record removed, edited, misnumbered or not in the lock, and a file that
    looks like a misnamed record. The interface is not compared (a build's tree need not
    hold it: the Nix package's tree is ``catalogue/``, ``api/`` and the lock)."""
    tree = Path(tree)
    problems, new = _record_problems(tree, read_api_lock(tree).get("records", {}), records(tree))
    return problems + [f"{CHANGES_DIR / name} is not in {LOCK_PATH}: run 'python3 scripts/locks.py extension-api'"
                       for name in new]


def require_record_lock(tree: Path) -> None:
    """Refuse to build from ``tree`` when its change records disagree with their lock
    (:func:`record_problems`). Raises :class:`~lemonpack.errors.LockError` (exit 1) naming
    every problem and the tree; returns None when the records hold."""
    problems = record_problems(tree)
    if problems:
        raise LockError(f"{Path(tree)}: the extension API's change records do not match {LOCK_PATH}, so the API "
                        "revision cannot be trusted:\n" + "\n".join(problems))


def check_api_lock(tree: Path) -> list[str]:
    """Every way the change records and the interface disagree with the lock, as sentences
    (empty: OK). This is what the change-record test and ``lemonpack extensions check`` run."""
    tree = Path(tree)
    lock = read_api_lock(tree)
    actual = records(tree)
    problems = record_problems(tree)
    new = [n for n in actual if n not in lock.get("records", {})]
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


__all__ = ["CHANGES_DIR", "INTERFACE_GLOBS", "LOCK_PATH", "RECORD_NAME", "check_api_lock", "interface",
           "record_names", "record_problems", "records", "refresh_api_lock", "require_record_lock"]
