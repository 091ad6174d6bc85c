"""The output files of ``catalogue build`` (docs/catalogue.md), written into the fresh
directory the build swaps in: ``catalogue.json``, ``catalogue-search.json``,
``entries/<kind>.<name>.json``, ``catalogue.json.sig``, ``feed.atom`` and the site
(:mod:`.site`).

Each entry is encoded once: its canonical JSON is its ``entries/`` file, the index's bytes are
spliced from those (:func:`_index_json`, the same bytes as ``canonical_json(index)``), and the
site's fragments are keyed by it. Every file goes through :class:`lemonpack.catalogue.memo.Writer`,
which takes the previous output's file when it holds the same bytes (a warm build rewrites
nothing that did not change); files made from the whole index are keyed by the sha256 of
``catalogue.json``, so they are neither made nor written again when it is the same.
"""

from __future__ import annotations

import json
from pathlib import Path

from lemonpack.canonical import canonical_json
from lemonpack.catalogue import signatures
from lemonpack.catalogue.feed import atom_feed
from lemonpack.catalogue.names import INDEX_NAME, SEARCH_NAME, SIG_NAME, entry_filename
from lemonpack.catalogue.search import search_file_bytes
from lemonpack.digest import Digest
from lemonpack.signing.simplesigning import sign_payload

FEED_NAME = "feed.atom"


def _entry_json(entry: dict) -> bytes:
    """One entry's canonical JSON (without the float walk: the whole index is checked for
    floats once, :func:`_index_json`)."""
    return canonical_json(entry, floats="shortest")


def _index_json(index: dict, entry_bytes: list[bytes]) -> bytes:
    """``canonical_json(index)`` from each entry's canonical JSON already made: the index's
    other fields encoded around an empty ``entries`` list (sorted keys put it first), the
    entries spliced in. Raises ``TypeError`` for a float anywhere in the index, as
    ``canonical_json`` does (:func:`lemonpack.canonical.refuse_floats_in`)."""
    from lemonpack.canonical import refuse_floats_in

    shell = canonical_json({**index, "entries": []})
    head = b'{"entries":['
    if not shell.startswith(head + b"]"):  # pragma: no cover - a field that sorts before "entries"
        return canonical_json(index)
    data = head + b",".join(entry_bytes) + shell[len(head):]
    refuse_floats_in(data, index["entries"])
    return data


def write_outputs(index: dict, tmp: Path, private=None, cache=None, previous=None, epoch: int = 0,
                  memo=None) -> bytes:
    """Write every output file of ``index`` into the (empty) directory ``tmp`` and return the
    bytes of ``catalogue.json``. ``cache``: rendered fragments and the digests of made
    outputs (:class:`lemonpack.catalogue.memo.PageCache`); ``previous``: the output of the
    last build (:class:`lemonpack.catalogue.memo.Previous`), whose files holding the bytes
    this build writes are hard-linked instead of written; ``epoch``: every file's mtime;
    ``memo``: remembers the history view of the written index. Entries are encoded once each
    (the index is spliced from them, :func:`_index_json`); files made from the whole index
    (the search index, the feed, the front page and the data scripts) are taken from
    ``previous`` when ``catalogue.json`` is the same."""
    from lemonpack.catalogue.memo import Writer

    writer = Writer(tmp, previous, cache, epoch)
    entry_bytes = [_entry_json(e) for e in index["entries"]]
    data = _index_json(index, entry_bytes)
    sha = Digest.of_bytes(data).hex
    writer.put(INDEX_NAME, data)
    # what a reader sees (the compact search index and the site are made from it): the
    # entries are reader-shaped already (:func:`_plain`), publishers and rejects are made so here
    parsed = {**json.loads(canonical_json({k: v for k, v in index.items() if k != "entries"})),
              "entries": index["entries"]}
    writer.put(SEARCH_NAME, key=f"file:{SEARCH_NAME}:{sha}", render=lambda: search_file_bytes(parsed, sha))
    (tmp / "entries").mkdir()
    for e, eb in zip(index["entries"], entry_bytes):
        writer.put("entries/" + entry_filename(e["id"]), eb)
    if private is not None:
        writer.put(SIG_NAME, (sign_payload(private, data) + "\n").encode("ascii"))
    writer.put(FEED_NAME, key=f"file:{FEED_NAME}:{sha}", render=lambda: atom_feed(index))
    if memo is not None:
        memo.remember_index(sha, index)
    try:
        from lemonpack.catalogue.site import render_site
    except ImportError:  # pragma: no cover
        return data
    render_site(parsed, tmp, signatures.index_digest(data), cache=cache, writer=writer, entry_bytes=entry_bytes,
                index_key=sha)
    return data
