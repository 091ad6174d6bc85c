"""Reading, verifying and updating a built catalogue index.

A built index is a directory (``catalogue.json``, ``catalogue.json.sig``, ``entries/``) or
an ``http(s)`` URL of such a directory. The cached copy lives in
``<XDG cache>/lemonpack/catalogue/`` (:func:`cached_dir`); ``update`` replaces it only after
the new index's signature verified against a trusted key (``--key``, else
``<XDG config>/lemonpack/catalogue.pub``) and every entry file matched the index.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from lemonpack.canonical import canonical_json
from lemonpack.catalogue.names import INDEX_NAME, SEARCH_NAME, SIG_NAME, entry_filename, verify_bytes
from lemonpack.errors import CatalogueError, ConfigError, FetchError, LemonpackError, SignatureError
from lemonpack.paths import cache_root, config_root

MAX_INDEX_BYTES = 256 * 1024 * 1024




def cached_dir() -> Path:
    """Where ``catalogue update`` keeps the index: ``<cache>/catalogue``."""
    return cache_root() / "catalogue"


def trusted_key_path(explicit: str | os.PathLike[str] | None) -> Path:
    """The trusted public key: ``explicit`` or ``<config>/catalogue.pub``. Raises
    LemonpackError when neither exists."""
    p = Path(explicit) if explicit else config_root() / "catalogue.pub"
    if not p.exists():
        raise ConfigError(f"no trusted catalogue key: {p} does not exist (pass --key PUBLIC.pem)")
    return p


def shipped_index() -> Path:
    """The index of the official entries shipped in the package (:mod:`.official`)."""
    return Path(str(resources.files("lemonpack.catalogue"))) / "shipped" / INDEX_NAME


def locate(index: str | os.PathLike[str] | None) -> Path:
    """The ``catalogue.json`` to read: ``index`` (a file or a directory holding it), else the
    cached copy (``catalogue update``), else the index of the official entries shipped in the
    package (so a search works right after install). Raises LemonpackError naming what is
    missing."""
    if index is None:
        p = cached_dir() / INDEX_NAME
        if p.is_file():
            return p
        shipped = shipped_index()
        if not shipped.is_file():
            raise CatalogueError(f"no catalogue index: {p} does not exist "
                                 "(run lemonpack catalogue update --from URL|DIR, or pass --index)")
        return shipped
    p = Path(index)
    if p.is_dir():
        p = p / INDEX_NAME
    if not p.is_file():
        raise CatalogueError(f"no catalogue index at {index}")
    return p


def load_index(index: str | os.PathLike[str] | None) -> dict:
    """The index dict at ``index`` (see :func:`locate`). Raises LemonpackError for a file
    that is not a schema-1 catalogue index."""
    p = locate(index)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise CatalogueError(f"{p}: not a catalogue index: {e}") from None
    return _index_doc(data, p)


def parse_large(data: bytes):
    """``json.loads(data)`` with the cyclic garbage collector paused: parsing builds tens of
    thousands of containers and no cycle, and the collector's passes over them are about a
    third of the time of a 10,000-entry index. Raises what ``json.loads`` raises."""
    with gc_paused():
        return json.loads(data)


@contextlib.contextmanager
def gc_paused():
    """The cyclic garbage collector off inside the block (as it was after): for work that
    makes tens of thousands of containers and no cycle (a search over a loaded index: with
    the collector on, 10,000 dicts made after loading a 10,000-entry index took 100 ms, not 1)."""
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _index_doc(data: bytes, p: Path) -> dict:
    try:
        doc = parse_large(data)
    except ValueError as e:
        raise CatalogueError(f"{p}: not a catalogue index: {e}") from None
    if not isinstance(doc, dict) or doc.get("schema") != 1 or not isinstance(doc.get("entries"), list):
        raise CatalogueError(f"{p}: not a catalogue index of schema 1")
    return doc


def index_sha256(data: bytes) -> str:
    """The sha256 (bare hex) of ``catalogue.json`` bytes, as ``catalogue-search.json`` records it."""
    from lemonpack.digest import Digest

    return Digest.of_bytes(data).hex


def search_file_for(data: bytes, index: dict | None = None) -> bytes:
    """The ``catalogue-search.json`` bytes derived from the ``catalogue.json`` bytes ``data``
    (``index``: those bytes parsed, when the caller has them):
    :func:`lemonpack.catalogue.search.search_file_bytes`."""
    from lemonpack.catalogue.search import search_file_bytes

    return search_file_bytes(json.loads(data) if index is None else index, index_sha256(data))


def _stat_key(p: Path) -> list[int]:
    st = p.stat()
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def search_stamps_path() -> Path:
    """Where :func:`load_search_index` remembers compact indexes it verified:
    ``<cache>/catalogue-search-verified.json``."""
    return cache_root() / "catalogue-search-verified.json"


def _compact(p: Path) -> dict | None:
    """The verified ``catalogue-search.json`` beside ``p`` (see :func:`load_search_index`), or None."""
    from lemonpack.catalogue import search

    compact, code = p.with_name(SEARCH_NAME), Path(search.__file__)
    try:
        keys = [_stat_key(p), _stat_key(compact), _stat_key(code)]
        doc = parse_large(compact.read_bytes())
        if [_stat_key(p), _stat_key(compact), _stat_key(code)] != keys:
            return None  # changed while read: the full index decides
    except (OSError, ValueError):
        return None
    if not (isinstance(doc, dict) and doc.get("format") == search.SEARCH_FORMAT):
        return None
    found = compact_index(doc)
    if found is None:
        return None
    stamps_file, where = search_stamps_path(), str(p.resolve())
    try:
        stamps = json.loads(stamps_file.read_bytes())
    except (OSError, ValueError):
        stamps = {}
    stamps = stamps if isinstance(stamps, dict) else {}
    stamp = {"stat": keys, "index_sha256": doc.get("index_sha256"), "code": doc.get("code")}
    if stamps.get(where) != stamp:  # not verified as these very files: hash the index and the code
        try:
            if (doc.get("code") != search.search_code() or doc.get("index_sha256") != index_sha256(p.read_bytes())
                    or [_stat_key(p), _stat_key(compact), _stat_key(code)] != keys):  # changed while hashed
                return None
        except OSError:
            return None
        from lemonpack.files import replace_file

        try:
            stamps_file.parent.mkdir(parents=True, exist_ok=True)
            replace_file(stamps_file, json.dumps({**{k: v for k, v in stamps.items() if k != where}, where: stamp},
                                                 sort_keys=True).encode())
        except OSError:
            pass  # a read-only cache: verified again next time
    return found


def compact_index(doc: dict[str, Any]) -> dict | None:
    """The search index of a parsed ``catalogue-search.json`` (:func:`lemonpack.catalogue.search.search_file_bytes`):
    ``{"schema": 1, "entries": [search_entry...], "hays", "vocabulary"}`` (the entries share
    their shape's objects: not to be modified), or None when ``doc`` is not of that shape."""
    shapes, rows, hays, vocab = (doc.get(k) for k in ("shapes", "rows", "hays", "vocabulary"))
    if not (isinstance(shapes, list) and isinstance(rows, list) and isinstance(hays, list)
            and isinstance(vocab, list) and len(rows) == len(hays)):
        return None
    entries = []
    try:
        for r in rows:
            e = dict(shapes[r[0]])
            if len(r) == 4:
                e["id"], e["name"], e["display_name"] = r[1], r[2], r[3]
            entries.append(e)
    except (TypeError, IndexError, KeyError, ValueError):
        return None
    return {"schema": 1, "entries": entries, "hays": hays, "vocabulary": vocab}


def load_search_index(index: str | os.PathLike[str] | None) -> dict:
    """What ``catalogue search`` reads: the index at ``index`` (:func:`locate`) as
    ``{"schema", "entries", "hays", "vocabulary"}`` with each entry reduced to the fields search reads
    (:func:`lemonpack.catalogue.search.search_entry`, :func:`compact_index`), from the compact
    ``catalogue-search.json`` beside ``catalogue.json`` (written by ``catalogue build`` and
    ``catalogue update``; a fraction of the size, parsed many times faster).

    The compact file is used only when it was derived from the ``catalogue.json`` beside it
    (the file the signature covers) by this code: its ``index_sha256`` is the sha256 of that
    file's bytes and its ``code`` :func:`lemonpack.catalogue.search.search_code`. Hashing a
    large index costs as much as the search, so a verified pair is remembered in
    :func:`search_stamps_path` by the device, inode, size, mtime and ctime of both files and of
    ``search.py`` (so a warm search imports no hashing at all; ctime
    cannot be set back by a user: any write, rename or ``touch`` changes it), and hashed again
    whenever one of those differs. A stale one (the index rebuilt or edited since), a
    malformed one or one of another index is ignored and the full ``catalogue.json`` parsed
    instead (:func:`load_index`'s dict, every field). Raises what :func:`load_index` raises."""
    p = locate(index)
    compact = _compact(p)
    return compact if compact is not None else load_index(p)


def find_entry(index: dict, ident: str) -> dict:
    """The entry with id ``ident``, or with name ``ident`` when exactly one has it. Raises
    LemonpackError (naming a rejection when the id was rejected)."""
    entries = index.get("entries", [])
    for e in entries:
        if e["id"] == ident:
            return e
    named = [e for e in entries if e["name"] == ident]
    if len(named) == 1:
        return named[0]
    if len(named) > 1:
        raise CatalogueError(f"{ident!r} is ambiguous: {', '.join(e['id'] for e in named)}")
    for r in index.get("rejected", []):
        if r["id"] == ident or r["id"].split(":", 1)[-1] == ident:
            raise CatalogueError(f"{r['id']} was rejected ({r['file']}): {'; '.join(r['reasons'])}")
    raise CatalogueError(f"no catalogue entry {ident!r}")


def verify_dir(directory: Path, public_pem: bytes, shown_as: str | None = None) -> list[str]:
    """Problems of the built index in ``directory``: the signature over ``catalogue.json``
    (missing or not verifying with ``public_pem``), and per entry its
    ``entries/<file>.json`` missing or different from the index's entry. Empty: valid.

    Each problem names its file under ``shown_as`` when given (the directory or URL the user
    named, when ``directory`` is a temporary copy of it), else under ``directory``."""
    def show(rel: str) -> str:
        return f"{shown_as.rstrip('/')}/{rel}" if shown_as else str(directory / rel)

    problems = []
    data = (directory / INDEX_NAME).read_bytes()
    sig = directory / SIG_NAME
    if not sig.is_file():
        problems.append(f"{show(SIG_NAME)}: missing (the index is unsigned)")
    elif not verify_bytes(public_pem, data, sig.read_text(encoding="ascii", errors="replace")):
        problems.append(f"{show(SIG_NAME)}: does not verify {INDEX_NAME} with the trusted key")
    try:
        index = json.loads(data)
    except ValueError as e:
        return problems + [f"{show(INDEX_NAME)}: not JSON: {e}"]
    compact = directory / SEARCH_NAME
    if compact.is_file() and compact.read_bytes() != search_file_for(data, index):  # tampered, or derived elsewhere
        problems.append(f"{show(SEARCH_NAME)}: differs from the search index derived from {INDEX_NAME}")
    for entry in index.get("entries", []):
        rel = f"entries/{entry_filename(entry['id'])}"
        f = directory / rel
        if not f.is_file():
            problems.append(f"{show(rel)}: missing")
        elif f.read_bytes() != canonical_json(entry):
            problems.append(f"{show(rel)}: differs from the index's entry {entry['id']}")
    return problems


def refetch_problems(index: dict, *, mirror=None) -> list[str]:
    """Re-fetch every community https entry from its source (or ``mirror``), never from the
    local cache: the downloads go into a fresh temporary cache that is removed afterwards,
    so a file swapped at the URL since it was cached is seen. Compares each sha256 with the
    entry's digest; a mismatch is reported, not stored."""
    from lemonpack.fetch import ArtifactCache, fetch

    out = []
    with tempfile.TemporaryDirectory(prefix="lemonpack-refetch-") as tmp:
        cache = ArtifactCache(Path(tmp))
        for e in index.get("entries", []):
            src = e.get("source", {})
            if src.get("type") != "https":
                continue
            try:
                fetch(src["url"], sha256=e["digest"], cache=cache, mirror=mirror, progress=False)
            except LemonpackError as exc:
                out.append(f"{e['id']}: {exc}")
    return out


def _parse_index(data: bytes, where: str) -> dict:
    """The index document ``data`` fetched from ``where``; a FetchError naming it when it is
    not a JSON object with an ``entries`` list (an HTML error page, a truncated file ...)."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise FetchError(f"{where}: not a catalogue index (not JSON: {e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list) or not all(
            isinstance(e, dict) and isinstance(e.get("id"), str) for e in doc["entries"]):
        raise FetchError(f"{where}: not a catalogue index (no list of entries with ids)")
    return doc


def update(source: str, public_pem: bytes) -> dict:
    """Fetch the index at ``source`` (a directory or an http(s) URL of one) into a temporary
    directory, verify it (:func:`verify_dir`) and only then replace the cached copy
    atomically. Returns ``{"entries": n, "generated", "path"}``. Raises
    :class:`SignatureError` (the cached copy untouched) or FetchError."""
    from lemonpack.digest import Digest  # here, not at the top: a search's start-up stays light

    dest = cached_dir()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".catalogue.tmp-", dir=dest.parent))
    shown_as = source  # what problems name: the user's URL or directory, not the temp copy
    try:
        if source.startswith(("http://", "https://")):
            from lemonpack.fetch.download import download_client, get_bytes

            base = source.rstrip("/")
            if base.endswith(INDEX_NAME):
                base = base[: -len(INDEX_NAME) - 1]
            shown_as = base
            from lemonpack.catalogue.bounded import transfer_bounds
            from lemonpack.httpclient import bounded

            with download_client() as client, bounded(client, transfer_bounds(MAX_INDEX_BYTES)):
                data = get_bytes(f"{base}/{INDEX_NAME}", max_bytes=MAX_INDEX_BYTES, client=client)
                (tmp / INDEX_NAME).write_bytes(data)
                try:
                    (tmp / SIG_NAME).write_bytes(get_bytes(f"{base}/{SIG_NAME}", max_bytes=MAX_INDEX_BYTES, client=client))
                except FetchError:
                    pass  # an unsigned index: verify_dir decides whether that is acceptable
                index = _parse_index(data, f"{base}/{INDEX_NAME}")
                (tmp / "entries").mkdir()
                for e in index.get("entries", []):
                    name = entry_filename(e["id"])
                    (tmp / "entries" / name).write_bytes(
                        get_bytes(f"{base}/entries/{name}", max_bytes=MAX_INDEX_BYTES, client=client))
        else:
            src = Path(source)
            if src.is_file():
                src = src.parent
            shown_as = str(src)
            if not (src / INDEX_NAME).is_file():
                raise CatalogueError(f"no {INDEX_NAME} in {source}")
            shutil.copy2(src / INDEX_NAME, tmp / INDEX_NAME)
            if (src / SIG_NAME).is_file():
                shutil.copy2(src / SIG_NAME, tmp / SIG_NAME)
            if (src / "entries").is_dir():
                shutil.copytree(src / "entries", tmp / "entries")
            else:
                (tmp / "entries").mkdir()
        problems = verify_dir(tmp, public_pem, shown_as)
        if problems:
            raise SignatureError(f"refusing the new index from {shown_as}, the cached copy is unchanged:\n  " + "\n  ".join(problems),
                                 what=INDEX_NAME)
        data = (tmp / INDEX_NAME).read_bytes()
        index = json.loads(data)
        (tmp / SEARCH_NAME).write_bytes(search_file_for(data, index))  # derived here from the verified bytes
        os.chmod(tmp, 0o755)
        from lemonpack.catalogue.build import replace_dir

        replace_dir(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"entries": len(index.get("entries", [])), "generated": index.get("generated"), "path": str(dest),
            "sha256": str(Digest.of_bytes((dest / INDEX_NAME).read_bytes()))}


def index_summary(index: dict[str, Any]) -> str:
    """One line: entries, rejected, date."""
    return f"{len(index.get('entries', []))} entries, {len(index.get('rejected', []))} rejected, generated {index.get('generated')}"


def trusted_key(explicit: str | os.PathLike[str] | None) -> bytes:
    """The bytes of the trusted public key (:func:`trusted_key_path`: ``explicit`` or
    ``<config>/catalogue.pub``), read as a user's file (:func:`lemonpack.files.read_user_file`).
    Raises LemonpackError when there is none, what ``read_user_file`` raises otherwise."""
    from lemonpack.files import read_user_file

    return read_user_file(trusted_key_path(explicit), "trusted key file")
