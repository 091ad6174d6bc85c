"""Search over a built catalogue index (semantics in docs/catalogue.md).

The same rules run in the static site's JavaScript; ``tests/catalogue/queries.json`` holds
the shared table both are tested against. Pure functions over the index dict
(``catalogue.json``'s shape), no I/O.

- query: whitespace-separated terms, case-insensitive; an entry matches when EVERY term is a
  substring of one of: id, name, display_name, publisher, a tag, a capability, description.
- filters (ANDed; a list value means any of): ``kind``, ``capability``, ``os``,
  ``accelerator``, ``gpu_arch`` (a concrete arch in some platform's ``archs``), ``official``
  (bool), ``signature``, ``pinning``, ``reproducible`` (status strings), ``publisher``. Each
  filter is tested on its own against the set of values over all of an entry's platforms.
- order: ranked, then index order within a rank (a stable sort): rank 0 when every term is a
  substring of the id or the name, 1 when some term is, 2 otherwise (a match in the display
  name, publisher, tags, capabilities or description only). Without terms: index order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lemonpack.errors import CatalogueError

FILTERS: tuple[str, ...] = ("kind", "capability", "os", "accelerator", "gpu_arch", "official", "signature",
                            "pinning", "reproducible", "publisher")


def _values(entry: Mapping[str, Any], name: str) -> set:
    """The set of values an entry offers for filter ``name``."""
    plats = entry.get("platforms") or []
    if name == "kind":
        return {entry.get("kind")}
    if name == "capability":
        return set(entry.get("capabilities") or [])
    if name == "os":
        return {p.get("os") for p in plats}
    if name == "accelerator":
        return {p.get("accelerator") for p in plats}
    if name == "gpu_arch":
        return {a for p in plats for a in (p.get("archs") or [])}
    if name == "official":
        return {bool(entry.get("official"))}
    if name in ("signature", "pinning", "reproducible"):
        return {(entry.get(name) or {}).get("status")}
    if name == "publisher":
        return {entry.get("publisher")}
    raise CatalogueError(f"unknown search filter {name!r} (known: {', '.join(FILTERS)})")


def haystack(entry: Mapping[str, Any]) -> list[str]:
    """The lower-cased texts a query term is looked for in."""
    texts = [entry.get("id"), entry.get("name"), entry.get("display_name"), entry.get("publisher")]
    texts += list(entry.get("tags") or []) + list(entry.get("capabilities") or [])
    texts.append(entry.get("description"))
    return [t.lower() for t in texts if isinstance(t, str)]


def _joined(entry: Mapping[str, Any]) -> str:
    """:func:`haystack` as one string, the texts separated by a newline: a term never holds
    whitespace (the query is split on it), so a term is a substring of this string exactly
    when it is a substring of one of the texts. One ``in`` per term instead of one per text."""
    return "\n".join(haystack(entry))


def matches(entry: Mapping[str, Any], terms: Iterable[str], filters: Mapping[str, Any]) -> bool:
    """Whether ``entry`` matches every (lower-case) term and every filter."""
    if terms:
        hay = _joined(entry)
        if not all(t in hay for t in terms):
            return False
    for name, want in filters.items():
        if want is None:
            continue
        wanted = set(want) if isinstance(want, (list, tuple, set, frozenset)) else {want}
        if not wanted & _values(entry, name):
            return False
    return True


def search(index: Mapping[str, Any], query: str = "", filters: Mapping[str, Any] | None = None) -> list[dict]:
    """The entries of ``index`` (``catalogue.json`` as a dict) matching ``query`` and
    ``filters``, ranked (:func:`rank`; index order within a rank). Raises :class:`LemonpackError` for an unknown filter name."""
    filters = dict(filters or {})
    unknown = sorted(set(filters) - set(FILTERS))
    if unknown:
        raise CatalogueError(f"unknown search filter {unknown[0]!r} (known: {', '.join(FILTERS)})")
    terms = [t.lower() for t in query.split()]
    found = [e for e in index.get("entries", []) if matches(e, terms, filters)]
    if terms:
        found.sort(key=lambda e: rank(e, terms))  # stable: index order within a rank
    return found


def rank(entry: Mapping[str, Any], terms: list[str]) -> int:
    """0 when every (lower-case) term is in the entry's id or name, 1 when some term is, else 2."""
    names = f"{entry.get('id') or ''}\n{entry.get('name') or ''}".lower()
    hits = sum(1 for t in terms if t in names)
    return 0 if hits == len(terms) else (1 if hits else 2)
