"""Search over a built catalogue index (semantics in docs/catalogue.md "Search semantics").

The same rules run in the static site's JavaScript (``static/site.js``); the vocabulary both
read is one table, ``static/search-rules.json`` (:func:`rules`), generated from the contract's
own tables by :func:`compute_rules` (a test checks the shipped file equals it), and
``tests/catalogue/queries.json`` is the query table both are tested against. Pure functions
over the index dict (``catalogue.json``'s shape), no I/O but reading the rules file.

- query: whitespace-separated terms, case-insensitive. Known phrases (``text to speech``) are
  joined into one term first. A term is a group of alternatives: itself, plus the synonyms
  the rules give it (capability words from the capability registry: ``tts`` = ``text to
  speech`` = ``speech_synthesis``; OS aliases: ``macos`` = ``darwin``). An entry matches when
  EVERY term has an alternative that is a substring of one of: id, name, display_name,
  publisher, a tag, a capability, the description, or the platform words (each platform's
  OS, accelerator, ``os/accelerator`` and concrete archs); a term that is a known GPU arch
  (``gfx1151``) also matches an entry that runs on that arch (:func:`runs_on_arch`).
- near misses: a one-word term without synonyms that matches no entry at all (filters
  aside) and is at most
  :func:`max_distance` edits (optimal string alignment: insert, delete, substitute, swap two
  neighbours) from a word of the index's vocabulary (:func:`vocabulary`) is replaced by the
  closest word (fewest edits, then alphabetical); :func:`search_report` says which.
- filters (ANDed; a list value means any of): ``kind``, ``capability``, ``os``,
  ``accelerator``, ``gpu_arch`` (:func:`runs_on_arch`: an arch listed for a platform, or any
  arch of the platform's accelerator when the platform runs on every arch), ``official``
  (bool), ``signature``, ``pinning``, ``reproducible`` (status strings), ``publisher``. Each
  filter is tested on its own against the set of values over all of an entry's platforms.
  :func:`check_filters` validates values against their vocabulary (what the CLI does).
- order: ranked, then index order within a rank (a stable sort): rank 0 when every term is
  in the id or the name, 1 when some term is, 2 otherwise. Without terms: index order.
  :func:`sort_entries` orders results by ``name``, ``new`` (first version's date, newest
  first) or ``updated`` (latest version's date, newest first), ties in the order given.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from lemonpack.errors import CatalogueError, UsageError

FILTERS: tuple[str, ...] = ("kind", "capability", "os", "accelerator", "gpu_arch", "official", "signature",
                            "pinning", "reproducible", "publisher")

#: Words people use for a capability of the registry (:mod:`lemonpack.contract.capabilities`),
#: keyed by the registry's name; with the name and its deployment mode they form one synonym
#: group. The extension tree's own capability names (``speech_synthesis``) are listed here.
CAPABILITY_WORDS: dict[str, tuple[str, ...]] = {
    "chat_completion": ("text generation", "text_generation", "llm"),
    "embeddings": ("embedding", "embed"),
    "reranking": ("rerank", "reranker"),
    "transcription": ("speech to text", "speech-to-text", "stt", "asr", "speech recognition",
                      "speech_recognition"),
    "image": ("image generation", "image_generation", "text to image", "text-to-image"),
    "tts": ("text to speech", "text-to-speech", "speech synthesis", "speech_synthesis"),
    "audio_generation": ("audio generation", "music"),
    "model_3d": ("3d",),
}
#: Other names of the contract's OS keys.
OS_ALIASES: dict[str, str] = {"macos": "darwin", "mac": "darwin", "osx": "darwin", "win": "windows"}

_TOKEN = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")


def compute_rules() -> dict:
    """The search vocabulary from the contract's tables (what ``static/search-rules.json``
    holds): ``{"kinds", "oses", "accelerators", "capabilities", "arch_families" (per
    accelerator, its known archs: :data:`lemonpack.catalogue.archs.KNOWN_ARCHS`),
    "synonyms" (word -> its group, sorted), "phrases" (multi-word synonyms, longest first)}``.
    Imports the contract (jsonschema): build and test time only."""
    from lemonpack.catalogue.archs import KNOWN_ARCHS
    from lemonpack.contract.builtins import ACCELERATORS, OS_NAMES
    from lemonpack.contract.capabilities import CAPABILITIES

    unknown = sorted(set(CAPABILITY_WORDS) - set(CAPABILITIES))
    if unknown:
        raise CatalogueError(f"CAPABILITY_WORDS names {unknown[0]!r}, not a registry capability")
    synonyms: dict[str, list[str]] = {}
    for name, cap in CAPABILITIES.items():
        group = sorted({name, *([cap.mode] if cap.mode and cap.mode != "chat" else []),
                        *CAPABILITY_WORDS.get(name, ())})
        if len(group) > 1:
            for word in group:
                synonyms[word] = sorted(set(synonyms.get(word, [])) | set(group))
    for alias, os_name in OS_ALIASES.items():
        synonyms[alias] = sorted({alias, os_name})
    phrases = sorted({w for w in synonyms if " " in w}, key=lambda w: (-len(w.split()), w))
    return {"kinds": ["recipe", "extension", "model"], "oses": list(OS_NAMES), "accelerators": list(ACCELERATORS),
            "capabilities": sorted(CAPABILITIES), "arch_families": {k: list(v) for k, v in KNOWN_ARCHS.items()},
            "synonyms": dict(sorted(synonyms.items())), "phrases": phrases}


@lru_cache(maxsize=1)
def rules() -> dict:
    """The shipped ``static/search-rules.json`` (:func:`compute_rules`' output), read once."""
    return json.loads(resources.files("lemonpack.catalogue").joinpath("static", "search-rules.json").read_bytes())


def runs_on_arch(entry: Mapping[str, Any], arch: str) -> bool:
    """Whether some platform of ``entry`` runs on the concrete GPU ``arch``: the arch is
    among the platform's ``archs``, or the platform runs on every arch (``any_arch``; absent:
    when it lists no archs) and ``arch`` is a known arch of its accelerator."""
    fam = rules()["arch_families"]
    for p in entry.get("platforms") or []:
        archs = p.get("archs") or []
        if arch in archs:
            return True
        if p.get("any_arch", not archs) and arch in fam.get(p.get("accelerator"), ()):
            return True
    return False


def _values(entry: Mapping[str, Any], name: str) -> set:
    """The set of values an entry offers for filter ``name`` (not ``gpu_arch``)."""
    plats = entry.get("platforms") or []
    if name == "kind":
        return {entry.get("kind")}
    if name == "capability":
        return set(entry.get("capabilities") or [])
    if name == "os":
        return {p.get("os") for p in plats}
    if name == "accelerator":
        return {p.get("accelerator") for p in plats}
    if name == "official":
        return {bool(entry.get("official"))}
    if name in ("signature", "pinning", "reproducible"):
        return {(entry.get(name) or {}).get("status")}
    if name == "publisher":
        return {entry.get("publisher")}
    raise CatalogueError(f"unknown search filter {name!r} (known: {', '.join(FILTERS)})")


def platform_words(entry: Mapping[str, Any]) -> str:
    """The searchable words of an entry's platforms: per platform ``os accelerator
    os/accelerator archs...``, space-separated."""
    words: list[str] = []
    for p in entry.get("platforms") or []:
        o, a = str(p.get("os") or ""), str(p.get("accelerator") or "")
        words += [o, a, f"{o}/{a}", *[str(x) for x in p.get("archs") or []]]
    return " ".join(words)


def haystack(entry: Mapping[str, Any]) -> list[str]:
    """The lower-cased texts a query term is looked for in."""
    texts = [entry.get("id"), entry.get("name"), entry.get("display_name"), entry.get("publisher")]
    texts += list(entry.get("tags") or []) + list(entry.get("capabilities") or [])
    texts += [entry.get("description"), platform_words(entry)]
    return [t.lower() for t in texts if isinstance(t, str)]


def _joined(entry: Mapping[str, Any]) -> str:
    """:func:`haystack` as one string, the texts separated by a newline (no alternative holds
    a newline, so a substring of this string is a substring of one text); lower-cased once."""
    texts = [entry.get("id"), entry.get("name"), entry.get("display_name"), entry.get("publisher"),
             *(entry.get("tags") or ()), *(entry.get("capabilities") or ()), entry.get("description"),
             platform_words(entry)]
    return "\n".join(t for t in texts if isinstance(t, str)).lower()


def terms(query: str) -> list[list[str]]:
    """The query's terms, each a list of alternatives (the term first): lower-cased, split on
    whitespace, known phrases joined, synonyms added."""
    r = rules()
    words = query.lower().split()
    out: list[list[str]] = []
    i = 0
    while i < len(words):
        for phrase in r["phrases"]:
            n = len(phrase.split())
            if " ".join(words[i:i + n]) == phrase:
                word, i = phrase, i + n
                break
        else:
            word, i = words[i], i + 1
        out.append([word] + [s for s in r["synonyms"].get(word, []) if s != word])
    return out


def _term_matches(alts: list[str], hay: str, entry: Mapping[str, Any], archs: frozenset) -> bool:
    if any(a in hay for a in alts):
        return True
    return alts[0] in archs and runs_on_arch(entry, alts[0])


def _keep(alts: list[str], hays: list[tuple[str, Any]], archs: frozenset, first: bool = False) -> list:
    """The ``(hay, entry)`` pairs of ``hays`` whose entry matches the term ``alts``
    (:func:`_term_matches`); ``first``: only the first such pair (is there any?)."""
    if alts[0] not in archs:  # an alternative holding another matches only where that one does
        need = sorted(set(alts), key=len)
        need = [a for i, a in enumerate(need) if not any(b in a for b in need[:i])]
        if len(need) == 1:  # the common case: one word, a substring test
            a = need[0]
            if first:
                return next(([x] for x in hays if a in x[0]), [])
            return [x for x in hays if a in x[0]]
        if len(need) <= 4:  # padded with repeats, the same test in one comprehension
            a, b, c, d = (need * 4)[:4]
            if first:
                return next(([x] for x in hays if a in x[0] or b in x[0] or c in x[0] or d in x[0]), [])
            return [x for x in hays if a in x[0] or b in x[0] or c in x[0] or d in x[0]]
    if first:
        return next(([x] for x in hays if _term_matches(alts, x[0], x[1], archs)), [])
    return [x for x in hays if _term_matches(alts, x[0], x[1], archs)]


@lru_cache(maxsize=1)
def _known_archs() -> frozenset:
    return frozenset(a for fam in rules()["arch_families"].values() for a in fam)


def matches(entry: Mapping[str, Any], ts: Iterable[list[str]], filters: Mapping[str, Any],
            hay: str | None = None) -> bool:
    """Whether ``entry`` matches every term (:func:`terms`' shape) and every filter
    (``hay``: its :func:`_joined` texts when the caller has them already)."""
    ts = list(ts)
    if ts:
        hay, archs = _joined(entry) if hay is None else hay, _known_archs()
        if not all(_term_matches(t, hay, entry, archs) for t in ts):
            return False
    for name, want in filters.items():
        if want is None:
            continue
        wanted = set(want) if isinstance(want, (list, tuple, set, frozenset)) else {want}
        if name == "gpu_arch":
            if not any(runs_on_arch(entry, a) for a in wanted):
                return False
        elif not wanted & _values(entry, name):
            return False
    return True


def osa_distance(a: str, b: str) -> int:
    """Optimal string alignment distance (Damerau-Levenshtein without repeated edits of one
    substring): insertions, deletions, substitutions and swaps of two neighbours."""
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def max_distance(term: str) -> int:
    """Edits a near miss may be away: 0 below 3 characters, 1 up to 5, else 2."""
    return 0 if len(term) < 3 else (1 if len(term) <= 5 else 2)


def vocabulary(index: Mapping[str, Any]) -> list[str]:
    """The words a near miss is corrected to, sorted: the tokens (``[a-z0-9]`` runs joined by
    ``.``, ``_`` or ``-``, and their parts) of every entry's id, name, display name,
    publisher, tags, capabilities and platform words, plus the synonym words; 3+ characters."""
    texts: list[str] = []
    for e in index.get("entries", []):
        for t in (e.get("id"), e.get("name"), e.get("display_name"), e.get("publisher"),
                  *(e.get("tags") or []), *(e.get("capabilities") or []), platform_words(e)):
            if isinstance(t, str):
                texts.append(t)
    # one findall over all texts (newline-separated: no token spans two), parts split once per token
    tokens = set(_TOKEN.findall("\n".join(texts).lower()))
    words: set[str] = {w for w in rules()["synonyms"] if " " not in w} | tokens
    for tok in tokens:
        words.update(re.split(r"[._-]", tok))
    return sorted(w for w in words if len(w) >= 3)


def suggest(term: str, vocab: Iterable[str]) -> str | None:
    """The closest word of ``vocab`` within :func:`max_distance` edits of ``term`` (fewest
    edits, then alphabetical), or None."""
    limit = max_distance(term)
    best: tuple[int, str] | None = None
    chars = set(term)
    for w in vocab:
        if abs(len(w) - len(term)) > limit or w == term:
            continue
        if len(set(w) - chars) > limit:  # a character term lacks costs an edit: a lower bound
            continue
        d = osa_distance(term, w)
        if d <= limit and (best is None or (d, w) < best):
            best = (d, w)
    return best[1] if best else None


def search_report(index: Mapping[str, Any], query: str = "", filters: Mapping[str, Any] | None = None) -> dict:
    """``{"results": [entries], "corrected": {term: word}}``: the entries of ``index``
    matching ``query`` and ``filters``, ranked (index order within a rank), after replacing
    each term no entry has by its near miss (:func:`suggest`). Raises CatalogueError for an
    unknown filter name."""
    filters = dict(filters or {})
    unknown = sorted(set(filters) - set(FILTERS))
    if unknown:
        raise CatalogueError(f"unknown search filter {unknown[0]!r} (known: {', '.join(FILTERS)})")
    entries = index.get("entries", [])
    ts = terms(query)
    corrected: dict[str, str] = {}
    archs = _known_archs()
    # one term, then one filter, at a time over the whole list (what matches() says per entry,
    # column by column: a search of 10,000 entries is a few list comprehensions)
    if ts:
        given = index.get("hays")  # catalogue-search.json's, made by _joined
        texts = given if isinstance(given, list) and len(given) == len(entries) else [_joined(e) for e in entries]
        hays = list(zip(texts, entries))
        vocab: list[str] | None = None
        for k, t in enumerate(ts):
            if len(t) > 1 or _keep(t, hays, archs, first=True):
                continue  # a synonym group is never corrected
            if vocab is None:  # catalogue-search.json's, made by vocabulary()
                given_vocab = index.get("vocabulary")
                vocab = given_vocab if isinstance(given_vocab, list) and given is not None else vocabulary(index)
            word = suggest(t[0], vocab)
            if word is not None:
                corrected[t[0]] = word
                ts[k] = terms(word)[0]
        for t in ts:
            hays = _keep(t, hays, archs)
        found = [e for _, e in hays]
    else:
        found = list(entries)
    for name, want in filters.items():
        if want is None:
            continue
        wanted = set(want) if isinstance(want, (list, tuple, set, frozenset)) else {want}
        if name == "gpu_arch":
            found = [e for e in found if any(runs_on_arch(e, a) for a in wanted)]
        else:
            found = [e for e in found if wanted & _values(e, name)]
    if ts:
        found.sort(key=lambda e: rank(e, ts))  # stable: index order within a rank
    return {"results": found, "corrected": corrected}


def search(index: Mapping[str, Any], query: str = "", filters: Mapping[str, Any] | None = None) -> list[dict]:
    """:func:`search_report`'s results."""
    return search_report(index, query, filters)["results"]


def rank(entry: Mapping[str, Any], ts: list[list[str]]) -> int:
    """0 when every term (an alternative of it) is in the entry's id or name, 1 when some
    term is, else 2."""
    names = f"{entry.get('id') or ''}\n{entry.get('name') or ''}".lower()
    hits = sum(1 for t in ts if any(a in names for a in t))
    return 0 if hits == len(ts) else (1 if hits else 2)


#: CLI option of each validated filter.
OPTION = {"kind": "--kind", "capability": "--capability", "os": "--os", "accelerator": "--accelerator",
          "gpu_arch": "--gpu-arch"}


def choices(index: Mapping[str, Any], name: str) -> list[str]:
    """The values filter ``name`` accepts: kinds, the contract's OS and accelerator names,
    the registry's capabilities and those of the index's entries, the known GPU archs and
    those the index lists."""
    r = rules()
    entries = index.get("entries", [])
    if name == "kind":
        return list(r["kinds"])
    if name == "os":
        return list(r["oses"])
    if name == "accelerator":
        return list(r["accelerators"])
    if name == "capability":
        return sorted(set(r["capabilities"]) | {c for e in entries for c in e.get("capabilities") or []})
    if name == "gpu_arch":
        known = [a for fam in r["arch_families"].values() for a in fam]
        listed = {a for e in entries for p in e.get("platforms") or [] for a in p.get("archs") or []}
        return list(dict.fromkeys(known + sorted(listed - set(known))))
    raise CatalogueError(f"filter {name!r} has no fixed vocabulary")


_LABEL = {"kind": "kind", "capability": "capability", "os": "OS", "accelerator": "accelerator", "gpu_arch": "GPU arch"}


def check_filters(index: Mapping[str, Any], filters: Mapping[str, Any]) -> dict:
    """``filters`` with every value of a validated filter (:data:`OPTION`) lower-cased and
    checked against :func:`choices`. Raises :class:`UsageError` (exit 2) naming the option,
    the value, a near miss or synonym ("did you mean") and the choices."""
    out = dict(filters)
    for name, option in OPTION.items():
        if name not in filters or filters[name] is None:
            continue
        values = filters[name] if isinstance(filters[name], (list, tuple)) else [filters[name]]
        allowed = choices(index, name)
        good = []
        for v in values:
            low = str(v).lower()
            if low in allowed:
                good.append(low)
                continue
            hint = next((s for s in rules()["synonyms"].get(low, []) if s in allowed), None) or suggest(low, allowed)
            shown = allowed if len(allowed) <= 40 else allowed[:40] + ["..."]
            raise UsageError(f"unknown {_LABEL[name]} {v!r}" + (f"; did you mean {hint!r}?" if hint else "")
                             + f" (choices: {', '.join(shown)})", param=option)
        out[name] = good
    return out


#: ``format`` of ``catalogue-search.json`` (:func:`search_file_bytes`).
SEARCH_FORMAT = "lemonpack-catalogue-search/2"
#: The entry fields ``catalogue-search.json`` keeps: what :func:`search_report`,
#: :func:`check_filters`, :func:`sort_entries` and the CLI's output read (the description is
#: searched through the entry's text in ``hays`` only).
SEARCH_FIELDS: tuple[str, ...] = ("id", "kind", "name", "display_name", "official", "publisher", "tags",
                                  "capabilities")
#: The fields of a compact entry that are its own (the rest is a shared "shape", :func:`search_file_bytes`).
_OWN = ("id", "name", "display_name")


def search_entry(entry: Mapping[str, Any]) -> dict:
    """``entry`` reduced to what search reads (:data:`SEARCH_FIELDS`; ``platforms`` as
    ``{"os", "accelerator", "archs", "any_arch"}`` (``any_arch`` only when the entry has it);
    ``signature`` / ``pinning`` / ``reproducible`` as ``{"status"}``; ``history`` as its
    first and latest dated version, ``{"date"}`` each): the search functions give the same
    answer for it as for the whole entry."""
    e = {k: entry[k] for k in SEARCH_FIELDS if k in entry}
    plats = []
    for p in entry.get("platforms") or []:
        q = {k: p[k] for k in ("os", "accelerator", "archs", "any_arch") if k in p}
        plats.append(q)
    e["platforms"] = plats
    for k in ("signature", "pinning", "reproducible"):
        if isinstance(entry.get(k), dict):
            e[k] = {"status": entry[k].get("status")}
    added, updated = entry_dates(entry)
    e["history"] = [{"date": added}, {"date": updated}] if added else []
    return e


def search_code() -> str:
    """sha256 (bare hex) of this module's source: what derives ``catalogue-search.json``
    (:func:`search_entry`, :func:`_joined`); a file written by other code is not used."""
    from lemonpack.digest import Digest

    return Digest.of_bytes(Path(__file__).read_bytes()).hex


def search_file_bytes(index: Mapping[str, Any], index_sha256: str) -> bytes:
    """The bytes of ``catalogue-search.json`` for the index ``index`` parsed from the
    ``catalogue.json`` bytes whose sha256 (bare hex) is ``index_sha256``: sorted-key JSON
    ``{"format": SEARCH_FORMAT, "code": search_code(), "index_sha256", "shapes", "rows",
    "hays", "vocabulary"}``, index order: each entry a row ``[shape, id, name, display_name]``
    (``[shape]`` when it lacks one of those: the shape is the whole entry then), the rest of
    its :func:`search_entry` (shared by many entries) stored once in ``shapes``; ``hays`` its
    searched text (:func:`_joined`), ``vocabulary`` the index's :func:`vocabulary`. A tenth of ``catalogue.json``
    for a catalogue of similar entries; :func:`lemonpack.catalogue.index.compact_index` reads it back. A reader uses it
    only when ``index_sha256`` is the sha256 of the ``catalogue.json`` beside it and ``code``
    its own (:func:`lemonpack.catalogue.index.load_search_index`); deterministic, so
    ``catalogue verify`` / ``update`` can derive it again and compare."""
    from lemonpack.canonical import canonical_json

    entries = [e for e in index.get("entries") or [] if isinstance(e, dict)]
    shapes: dict[str, int] = {}
    rows: list[list] = []
    for e in entries:
        se = search_entry(e)
        own = all(k in se for k in _OWN)
        shape = {k: v for k, v in se.items() if k not in _OWN} if own else se
        text = canonical_json(shape, floats="shortest").decode("utf-8")
        n = shapes.setdefault(text, len(shapes))
        rows.append([n, se["id"], se["name"], se["display_name"]] if own else [n])
    body = ",".join(shapes)  # in first-use order: the n-th key is shape n
    doc = json.dumps({"format": SEARCH_FORMAT, "code": search_code(), "index_sha256": index_sha256, "shapes": [],
                      "rows": rows, "hays": [_joined(e) for e in entries], "vocabulary": vocabulary({"entries": entries})},
                     sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return doc.replace('"shapes":[]', '"shapes":[' + body + "]", 1).encode("utf-8")


#: Result orders: ``relevance`` (the search's own), ``name``, ``new``, ``updated``.
SORTS: tuple[str, ...] = ("relevance", "name", "new", "updated")


def entry_dates(entry: Mapping[str, Any]) -> tuple[str, str]:
    """``(added, updated)``: the dates (RFC 3339 strings) of the entry's first and latest
    version in its ``history``; ``""`` when it has none."""
    hist = [h for h in entry.get("history") or [] if isinstance(h, dict) and isinstance(h.get("date"), str)]
    return (hist[0]["date"], hist[-1]["date"]) if hist else ("", "")


def sort_entries(entries: list, order: str) -> list:
    """``entries`` in ``order`` (:data:`SORTS`): ``relevance`` as given; ``name`` by name then
    id; ``new`` / ``updated`` by the first / latest version's date, newest first. Stable: ties
    keep the order given; ``order`` is read case-insensitively, as the filters. Raises :class:`UsageError` else."""
    given, order = order, order.strip().lower()
    if order == "relevance":
        return list(entries)
    if order == "name":
        return sorted(entries, key=lambda e: (str(e.get("name") or ""), str(e.get("id") or "")))
    if order in ("new", "updated"):
        k = 0 if order == "new" else 1
        return sorted(entries, key=lambda e: entry_dates(e)[k], reverse=True)  # reverse keeps ties in order
    raise UsageError(f"unknown order {given!r} (choices: {', '.join(SORTS)})", param="--sort")
