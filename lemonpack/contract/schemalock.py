"""Per-major recipe schemas and their lock file (RFC section 11, decision D6).

``schema/recipe-v<major>.schema.json`` holds each major; ``schema/lock.json`` pins each
major's canonical sha256 (sha256 of the schema's canonical JSON, so whitespace edits do
not count) and a ``released`` flag. A released major is frozen: :func:`refresh_lock`
refuses to re-pin it (a change to a released contract is a new major, section 11).
An unreleased major may be corrected, but never silently: re-pinning a changed schema
needs a reason, and the entry's ``history`` keeps every earlier sha256 with the reason it
was replaced. :func:`check_lock` is what the schema-lock test and ``lemonpack schema
check`` run.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from lemonpack.digest import Digest
from lemonpack.files import replace_file
from lemonpack.errors import LockError

SCHEMA_DIR = Path(str(resources.files("lemonpack.contract") / "schema"))
LOCK_FILE = SCHEMA_DIR / "lock.json"


def schema_path(major: int, schema_dir: Path = SCHEMA_DIR, stem: str = "recipe") -> Path:
    """Path of the schema file for contract ``major`` (``<stem>-v<major>.schema.json``; the
    extension manifest schema uses ``stem="extension"``)."""
    return schema_dir / f"{stem}-v{major}.schema.json"


def load_schema(major: int = 1, schema_dir: Path = SCHEMA_DIR, stem: str = "recipe") -> dict[str, Any]:
    """The parsed JSON Schema of contract ``major``; LemonpackError if it is not shipped."""
    path = schema_path(major, schema_dir, stem)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LockError(f"no schema shipped for contract major {major} ({path})") from None


def canonical_sha256(path: Path) -> str:
    """Hex sha256 of the canonical JSON (sorted keys, compact, UTF-8) of a schema file."""
    from lemonpack.canonical import canonical_json

    doc = json.loads(path.read_text(encoding="utf-8"))
    return Digest.of_bytes(canonical_json(doc, floats="shortest")).hex


def read_lock(lock_file: Path = LOCK_FILE) -> dict[str, Any]:
    """The lock document: ``{"majors": {"1": {"file", "sha256", "released"}}}``."""
    return json.loads(lock_file.read_text(encoding="utf-8"))


def shipped_majors(schema_dir: Path = SCHEMA_DIR, stem: str = "recipe") -> list[int]:
    """Every major that has a schema file, ascending."""
    out = []
    for p in schema_dir.glob(f"{stem}-v*.schema.json"):
        num = p.name[len(f"{stem}-v"):-len(".schema.json")]
        if num.isdigit():
            out.append(int(num))
    return sorted(out)


def check_lock(schema_dir: Path = SCHEMA_DIR, lock_file: Path | None = None, stem: str = "recipe") -> list[str]:
    """Every mismatch between the schema files and the lock, as sentences (empty: OK)."""
    lock_file = lock_file or schema_dir / "lock.json"
    majors = read_lock(lock_file).get("majors", {})
    problems = []
    for major in shipped_majors(schema_dir, stem):
        entry = majors.get(str(major))
        actual = canonical_sha256(schema_path(major, schema_dir, stem))
        if entry is None:
            problems.append(f"major {major}: schema file is not in the lock; run 'python3 scripts/locks.py recipe-schema'")
        elif entry.get("sha256") != actual:
            verb = "is released and frozen: restore it" if entry.get("released") else "changed; run 'python3 scripts/locks.py recipe-schema' after review"
            problems.append(f"major {major}: schema sha256 {actual} != locked {entry.get('sha256')}: the schema {verb}")
    for major in majors:
        if not schema_path(int(major), schema_dir, stem).exists():
            problems.append(f"major {major}: locked but its schema file is missing (majors are never removed)")
    return problems


def refresh_lock(schema_dir: Path = SCHEMA_DIR, lock_file: Path | None = None,
                 reason: str | None = None, stem: str = "recipe") -> dict[str, Any]:
    """Re-pin every unreleased major; refuse (LemonpackError) to change a released one.

    A major whose schema changed is re-pinned only with a ``reason`` (a sentence: what
    changed and why); its previous sha256 and the reason are appended to the entry's
    ``history`` (``[{"sha256", "reason"}]``, oldest first). Writes the lock atomically and
    returns the new lock document.
    """
    lock_file = lock_file or schema_dir / "lock.json"
    lock = read_lock(lock_file) if lock_file.exists() else {"majors": {}}
    majors = lock.setdefault("majors", {})
    for major in shipped_majors(schema_dir, stem):
        actual = canonical_sha256(schema_path(major, schema_dir, stem))
        entry = majors.get(str(major))
        changed = bool(entry) and entry.get("sha256") != actual
        if changed and entry.get("released"):
            raise LockError(f"contract major {major} is released; its schema is frozen and cannot be re-locked")
        if changed and not (reason and reason.strip()):
            raise LockError(f"contract major {major}: the schema changed; say why with --reason "
                            "(recorded in the lock's history)")
        history = list(entry.get("history", [])) if entry else []
        if changed:
            assert reason is not None, "a change without a reason was refused above"
            history.append({"sha256": entry.get("sha256"), "reason": reason.strip()})
        majors[str(major)] = {"file": schema_path(major, schema_dir, stem).name, "sha256": actual,
                              "released": bool(entry and entry.get("released"))}
        if history:
            majors[str(major)]["history"] = history
    data = json.dumps(lock, indent=2, sort_keys=True) + "\n"
    replace_file(lock_file, data.encode())
    return lock
