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

It also keeps, by the sha256 of what they are made from, each entry's rendered list item
(``items``) and the sha256 of every other output it made (``made``: each entry's page, the
whole-index files): an unchanged entry is not rendered again, and an output whose bytes are
known is taken from the previous output directory (:class:`Previous`) instead of written
again, when the file there still holds exactly those bytes (read and hashed, never trusted).

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

VERSION = 2


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


def entry_key_prefix(publisher: dict, publisher_pems: list[str], official_ids: list[str]) -> bytes:
    """What :func:`entry_key` hashes before the entry's bytes (the same for every entry of a
    publisher in one build: made once per publisher)."""
    return (f"{code_fingerprint()}\nentry\n".encode()
            + json.dumps([publisher, publisher_pems, sorted(official_ids)], sort_keys=True).encode() + b"\0")


def entry_key(entry_bytes: bytes, publisher: dict | None = None, publisher_pems: list[str] | None = None,
              official_ids: list[str] | None = None, *, prefix: bytes | None = None) -> str:
    """The memo key of a community entry (see the module docstring); ``prefix``: its
    :func:`entry_key_prefix`, when the caller has it (instead of the three arguments)."""
    if prefix is None:
        prefix = entry_key_prefix(publisher or {}, publisher_pems or [], official_ids or [])
    return Digest.of_bytes(prefix + entry_bytes).hex


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
        self.items: dict[str, Any] = {}
        self.used_items: dict[str, Any] = {}
        self.made: dict[str, str] = {}
        self.used_made: dict[str, str] = {}
        self.histories: dict[str, Any] | None = None  # :meth:`previous_index`'s view of the last output
        self.used_histories: dict[str, Any] | None = None
        if path is None:
            return
        try:
            data = json.loads(path.read_bytes())
            if data.get("version") == VERSION and data.get("code") == code_fingerprint():
                self.entries = dict(data.get("entries") or {})
                self.valid = dict(data.get("valid") or {})
                self.items = dict(data.get("items") or {})
                self.made = dict(data.get("made") or {})
                self.histories = data.get("histories") if isinstance(data.get("histories"), dict) else None
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

    def previous_index(self, sha256: str) -> dict | None:
        """What the history carry reads of the index an earlier build wrote
        (:func:`lemonpack.catalogue.history.carry_history`: ``generated`` and each entry's ``id`` and
        ``history``), when that index's bytes had the sha256 (bare hex) ``sha256``; else None."""
        h = self.histories
        if h is None or h.get("index_sha256") != sha256 or not isinstance(h.get("index"), dict):
            return None
        return h["index"]

    def remember_index(self, sha256: str, index: dict) -> None:
        """Remember the history view of the index this build wrote (bytes of sha256 ``sha256``)."""
        self.used_histories = {"index_sha256": sha256, "index": {
            "schema": index.get("schema"), "generated": index.get("generated"),
            "entries": [{"id": e["id"], "history": e["history"]} for e in index["entries"]]}}

    def page_cache(self) -> "PageCache | None":
        """The cache of rendered site fragments (:func:`lemonpack.catalogue.site.site_files`)."""
        return None if self.path is None else PageCache(self)

    def save(self) -> None:
        """Write what this build used (atomically); a disk that refuses is ignored."""
        if self.path is None:
            return
        if (self.used_entries.keys() == self.entries.keys() and self.used_valid.keys() == self.valid.keys()
                and self.used_items.keys() == self.items.keys() and self.used_made == self.made
                and self.used_histories == self.histories):
            return  # nothing new, nothing stale: the file on disk is this memo already
        from lemonpack.files import replace_file

        data = {"version": VERSION, "code": code_fingerprint(), "entries": self.used_entries,
                "valid": self.used_valid, "items": self.used_items, "made": self.used_made,
                "histories": self.used_histories}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            replace_file(self.path, json.dumps(data, sort_keys=True, ensure_ascii=False).encode("utf-8"))
        except (OSError, TypeError, ValueError):
            pass


class PageCache:
    """The site renderer's view of a :class:`Memo`: rendered list items (``item`` /
    ``remember_item``) and the sha256 of made outputs (``made`` / ``remember_made``), by the key
    of what they are made from, recording what this build used."""

    def __init__(self, memo: Memo):
        self.memo = memo

    def item(self, key: str) -> Any:
        hit = self.memo.items.get(key)
        if hit is not None:
            self.memo.used_items[key] = hit
        return hit

    def remember_item(self, key: str, item: Any) -> None:
        self.memo.used_items[key] = item

    def made(self, key: str) -> str | None:
        """The sha256 (bare hex) of the output made from ``key`` by an earlier build, or None."""
        return self.memo.made.get(key)

    def remember_made(self, key: str, sha256: str) -> None:
        self.memo.used_made[key] = sha256


class Previous:
    """The output directory of the previous build (``root``; None or absent: nothing to
    reuse), whose files a build hard-links into its new output instead of writing them again
    when they hold exactly the bytes it would write: :meth:`link_same` compares the bytes,
    :meth:`link_digest` their sha256 with one an earlier build recorded (:class:`PageCache`).
    Only a regular file of mode 0644 is taken. A link shares the inode, so the old tree's
    removal after the swap only drops names (on this kind of disk, unlinking a file whose
    blocks are freed costs milliseconds; a name, microseconds). Raises nothing: anything
    unexpected means "write it"."""

    def __init__(self, root: Path | None, epoch: int = 0):
        self.root = root if root is not None and root.is_dir() and not root.is_symlink() else None
        self._root = str(self.root) if self.root is not None else ""  # joined as strings: 20,000 calls
        self.epoch = epoch
        self.linked = 0

    def _take(self, rel: str, dest: str, same) -> bool:
        """Link ``root/rel`` at ``dest``, then read the linked file (its inode is fixed now:
        nothing can swap it between the check and the link) and keep it when ``same(bytes)``
        holds; otherwise remove the link. True when kept."""
        import os
        import stat

        if self.root is None:
            return False
        try:
            os.link(f"{self._root}/{rel}", dest, follow_symlinks=False)
        except OSError:
            return False
        ok = False
        try:
            fd = os.open(dest, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644:
                    with os.fdopen(os.dup(fd), "rb") as f:
                        ok = same(f.read())
                    if ok and st.st_mtime_ns != self.epoch * 10**9:  # the build's date on every file
                        os.utime(fd, (self.epoch, self.epoch))
            finally:
                os.close(fd)
        except OSError:
            ok = False
        if not ok:
            try:
                os.unlink(dest)
            except OSError:
                pass
            return False
        self.linked += 1
        return True

    def link_same(self, rel: str, data: bytes, dest: str) -> bool:
        """Link ``root/rel`` at ``dest`` when it holds exactly ``data``; True when linked."""
        return self._take(rel, dest, lambda old: old == data)

    def link_digest(self, rel: str, sha256: str | None, dest: str) -> bool:
        """Link ``root/rel`` at ``dest`` when its bytes have the sha256 (bare hex) ``sha256``."""
        return sha256 is not None and self._take(rel, dest, lambda old: Digest.of_bytes(old).hex == sha256)


class Writer:
    """Writes a build's output files into the fresh directory ``root``, each taken from the
    previous output (:class:`Previous`) when that holds its bytes, else written (``O_EXCL``,
    mode 0644, mtime ``epoch``). :meth:`put` takes a file's bytes, or the key of what it is
    made from and a function rendering it (called only when no file of that key can be
    taken); made files' sha256 go to ``cache`` (:class:`PageCache`) for the next build.
    Raises OSError when the disk refuses."""

    def __init__(self, root: Path, previous: "Previous | None" = None, cache: "PageCache | None" = None,
                 epoch: int = 0):
        self.root, self.previous, self.cache, self.epoch = root, previous, cache, epoch
        self.written = 0
        self._dirs: set[str] = set()

    def put(self, rel: str, data: bytes | None = None, key: str | None = None, render: Any = None) -> None:
        """Put the file ``rel`` (posix, relative to ``root``): ``data``, or what ``render()``
        returns for ``key``."""
        import os

        parent = rel.rpartition("/")[0]
        if parent and parent not in self._dirs:
            os.makedirs(f"{self.root}/{parent}", exist_ok=True)
            self._dirs.add(parent)
        dest = f"{self.root}/{rel}"
        prev = self.previous if self.previous is not None and self.previous.root is not None else None
        if data is None:
            sha = self.cache.made(key) if self.cache is not None and key is not None else None
            if prev is not None and sha is not None and prev.link_digest(rel, sha, dest):
                if self.cache is not None and key is not None:
                    self.cache.remember_made(key, sha)
                return
            data = render()
            assert data is not None
            if self.cache is not None and key is not None:
                self.cache.remember_made(key, Digest.of_bytes(data).hex)
        elif prev is not None and prev.link_same(rel, data, dest):
            return
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.utime(f.fileno(), (self.epoch, self.epoch))
        self.written += 1
