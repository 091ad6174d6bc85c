"""What a warm ``catalogue build`` remembers: the verified description of each entry whose
inputs have not changed, so unchanged inputs are not fetched, parsed and checked again.

An entry file pins everything its description depends on: the source's sha256 (or OCI digest),
the signature value, the name. A community recipe from ``https`` or ``git`` with no signature
URL, no ``published_digest`` and no ``--rebuild`` is described by a pure function of:

- the bytes of its entry file (which pin the recipe's sha256: the recipe is those bytes);
- its publisher (id, display name, keys);
- the official recipe ids it must not claim;
- lemonpack's own code and schemas (:func:`code_fingerprint`: the rules that judged it).

The memo maps the sha256 of those (:func:`entry_key`) to the entry's index object; it also
remembers the entry and publisher files that passed their schema, with their parsed
documents (:func:`file_key`), so they are not parsed and checked again when the file's bytes
and the code are the same. Entries whose
description depends on something outside those inputs (a signature URL, a registry's
signature, a rebuild, an extension's API and collision checks) are always verified again.

It also keeps the rendered site fragments (each entry's page and list item) by the sha256 of
what they are rendered from, so an unchanged entry is not rendered again.

The memo is one JSON file, ``<cache>/catalogue-build/memo.json``, read once and
replaced atomically once per build with exactly what that build used (stale keys drop out).
A memo that cannot be read is ignored (the build verifies everything, as a cold build does).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from lemonpack.digest import Digest, Hasher

VERSION = 1


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """sha256 over lemonpack's own ``.py`` and ``.json`` package files (paths and bytes), in
    path order: any change of code, schema or template invalidates the memo."""
    import lemonpack

    root = Path(lemonpack.__file__).parent
    h = Hasher()
    h.write(f"memo {VERSION}\n".encode())
    for p in sorted(root.rglob("*")):
        if p.suffix in (".py", ".json", ".html", ".js", ".css") and p.is_file() and "__pycache__" not in p.parts:
            h.write(p.relative_to(root).as_posix().encode() + b"\0")
            h.write(bytes.fromhex(Digest.of_bytes(p.read_bytes()).hex))
    return h.digest().hex


def file_key(data: bytes, kind: str) -> str:
    """The memo key of a source file of ``kind`` (``entry`` / ``publisher``) with ``data``."""
    return Digest.of_bytes(f"{code_fingerprint()}\n{kind}\n".encode() + data).hex


def entry_key(entry_bytes: bytes, publisher: dict, publisher_pems: list[str], official_ids: list[str]) -> str:
    """The memo key of a community entry (see the module docstring)."""
    h = Hasher()
    h.write(f"{code_fingerprint()}\nentry\n".encode())
    h.write(json.dumps([publisher, publisher_pems, sorted(official_ids)], sort_keys=True).encode() + b"\0")
    h.write(entry_bytes)
    return h.digest().hex


def memoizable(ent, rebuild: bool) -> bool:
    """Whether ``ent``'s description is a pure function of the :func:`entry_key` inputs."""
    return (ent.kind == "recipe" and ent.source.get("type") in ("https", "git") and not rebuild
            and not ent.published_digest and not (ent.signature and "url" in ent.signature))


class Memo:
    """The memo at ``path`` (see the module docstring): ``entries`` key -> index entry,
    ``valid`` file keys that passed their schema. ``used_*`` collect what this build used."""

    def __init__(self, path: Path | None):
        self.path = path
        self.entries: dict[str, Any] = {}
        self.valid: dict[str, Any] = {}
        self.used_entries: dict[str, Any] = {}
        self.used_valid: dict[str, Any] = {}
        self.pages: dict[str, str] = {}
        self.used_pages: dict[str, str] = {}
        if path is None:
            return
        try:
            data = json.loads(path.read_bytes())
            if data.get("version") == VERSION and data.get("code") == code_fingerprint():
                self.entries = dict(data.get("entries") or {})
                self.valid = dict(data.get("valid") or {})
                self.pages = dict(data.get("pages") or {})
        except (OSError, ValueError, AttributeError, TypeError):
            pass

    def entry(self, key: str) -> dict | None:
        """The remembered entry for ``key``, or None (the caller does not modify it: it is
        also what :meth:`save` writes back)."""
        hit = self.entries.get(key)
        if hit is None:
            return None
        self.used_entries[key] = hit
        return hit

    def remember(self, key: str, entry: dict) -> None:
        self.used_entries[key] = entry

    def valid_doc(self, key: str) -> dict | None:
        """The parsed document of a file that passed its schema, or None (not to be modified)."""
        doc = self.valid.get(key)
        if doc is None:
            return None
        self.used_valid[key] = doc
        return doc

    def mark_valid(self, key: str, doc: dict) -> None:
        try:
            json.dumps(doc)
        except (TypeError, ValueError):  # a TOML date or time: not kept (checked again next time)
            return
        self.used_valid[key] = doc

    def page_cache(self) -> "PageCache | None":
        """The cache of rendered site fragments (:func:`lemonpack.catalogue.site.site_files`)."""
        return None if self.path is None else PageCache(self)

    def save(self) -> None:
        """Write what this build used (atomically); a disk that refuses is ignored."""
        if self.path is None:
            return
        if (self.used_entries.keys() == self.entries.keys() and self.used_valid.keys() == self.valid.keys()
                and self.used_pages.keys() == self.pages.keys()):
            return  # nothing new, nothing stale: the file on disk is this memo already
        from lemonpack.files import replace_file

        data = {"version": VERSION, "code": code_fingerprint(), "entries": self.used_entries,
                "valid": self.used_valid, "pages": self.used_pages}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            replace_file(self.path, json.dumps(data, sort_keys=True, ensure_ascii=False).encode("utf-8"))
        except (OSError, TypeError, ValueError):
            pass


class PageCache:
    """The site renderer's view of a :class:`Memo`: ``get(key)`` and ``cache[key] = html``,
    recording what this build used."""

    def __init__(self, memo: Memo):
        self.memo = memo

    def get(self, key: str) -> str | None:
        hit = self.memo.pages.get(key)
        if hit is not None:
            self.memo.used_pages[key] = hit
        return hit

    def __setitem__(self, key: str, html: str) -> None:
        self.memo.used_pages[key] = html
