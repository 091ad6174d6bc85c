"""The catalogue's static site: ``render_site(index, out)`` ("a static HTML site").

Input: the catalogue index (``catalogue.json``'s shape, schema 1, docs/catalogue.md).
Output, under ``out`` (the directory ``lemonpack catalogue build --out`` writes):

- ``index.html``: the front page: a search box, facets (kind, capability, OS, accelerator,
  GPU arch, official/community, signature, pinning, reproducibility, publisher), a
  "runs on this host" file input, the first :data:`FRONT_ITEMS` entries; ``all.html``: every entry
  (no script: the list for JavaScript off). site.js shows 50 results at a time, from the data.
- ``entry/<slug>.html``: one page per entry (see :func:`entry_slug`): description, digests,
  source, platforms table, pinned images and artifacts, capabilities, the exact
  download/install/run/nix commands (download first), signature status with the key fingerprint. No script at all.
- ``assets/catalogue-data.js``: ``window.CATALOGUE = <page data>;`` (pages opened from
  ``file://`` cannot fetch JSON, but may load a local script): only what the front page's
  search, facets and host fit read, one array per entry (:func:`page_data`); the full index
  stays in ``catalogue.json`` and the entry pages. ``assets/search-rules.js``:
  ``window.CATALOGUE_RULES = <the search vocabulary>;`` (:func:`lemonpack.catalogue.search.rules`,
  the table the CLI's search reads). The scripts are ``defer`` in the head.
- ``assets/site.js`` (search + facets + URL-fragment state + host fit), ``assets/site.css``.

The hard part is the description: it is Markdown from community publishers, i.e. untrusted.
It is rendered by markdown-it-py in CommonMark mode with raw HTML OFF (an HTML tag in the
source becomes visible text) and the result is then cleaned by nh3 (ammonia) with a small
allowlist of tags and attributes, links restricted to ``http``/``https``/relative URLs, no
images (they would load remote content), and ``rel="nofollow noopener noreferrer"`` on
links. Every other value goes through Jinja2 with autoescaping on. As a second fence, each
page carries a Content-Security-Policy that allows scripts only from the site's own files
(entry pages allow none).

Output is byte-reproducible: templates and assets are package data, facet values are sorted,
nothing depends on the clock or the file system order (the only date is the index's own
``generated``). Files are written atomically (temp file + rename); entry pages of a previous
run that no longer correspond to an entry are removed.

The page's search must agree with ``lemonpack catalogue search`` (docs/catalogue.md, "Search
semantics"); :data:`FACETS` is the facet list both use and the shared query table
``tests/catalogue/queries.json`` is run against the page by the browser tests.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import nh3
from markdown_it import MarkdownIt
from markupsafe import Markup, escape

from lemonpack.catalogue.commands import ORDER as COMMAND_ORDER
from lemonpack.errors import BIDI_CONTROLS, StorageError, visible_bidi
from lemonpack.files import replace_file
from lemonpack.canonical import canonical_json
from lemonpack.digest import Digest

#: Facets in display order: (filter key as in ``lemonpack catalogue search`` and the URL fragment, label).
FACETS: tuple[tuple[str, str], ...] = (
    ("kind", "Kind"),
    ("capability", "Capability"),
    ("os", "OS"),
    ("accelerator", "Accelerator"),
    ("gpu_arch", "GPU arch"),
    ("official", "Official / community"),
    ("signature", "Signature"),
    ("pinning", "Pinning"),
    ("reproducible", "Reproducibility"),
    ("publisher", "Publisher"),
)

#: Tags the sanitiser keeps (CommonMark's output vocabulary minus images and raw HTML).
ALLOWED_TAGS: frozenset[str] = frozenset({
    "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "li", "ol", "p", "pre", "s", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
})
#: Attributes per tag the sanitiser keeps (``rel`` on links is set by nh3 itself).
ALLOWED_ATTRIBUTES: dict[str, set[str]] = {
    "a": {"href", "title"},
    "ol": {"start"},
    "td": {"align"},
    "th": {"align"},
}
#: URL schemes links may use; relative URLs (no scheme) pass as well.
ALLOWED_URL_SCHEMES: frozenset[str] = frozenset({"http", "https"})

_MD = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table") \
    .enable("strikethrough")

_CSP_INDEX = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
              "base-uri 'none'; form-action 'none'")
_CSP_ENTRY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; base-uri 'none'; "
              "form-action 'none'")


def render_markdown(text: str) -> Markup:
    """Render untrusted Markdown ``text`` to sanitised HTML (a :class:`Markup` string).

    markdown-it-py (CommonMark, tables, strikethrough) with raw HTML disabled, then nh3
    (ammonia) keeping only :data:`ALLOWED_TAGS` / :data:`ALLOWED_ATTRIBUTES`, links only
    with :data:`ALLOWED_URL_SCHEMES` or relative, ``rel="nofollow noopener noreferrer"``.
    Content of ``script``/``style`` elements is dropped entirely. Raises nothing for any
    string input (a non-string is treated as empty)."""
    if not isinstance(text, str) or not text:
        return Markup("")
    return _sanitise(_MD.renderer.render(_MD.parse(text), _MD.options, {}))


def _sanitise(html: str) -> Markup:
    """nh3 over markdown-it's ``html`` (see :func:`render_markdown`)."""
    clean = nh3.clean(
        html,
        tags=set(ALLOWED_TAGS),
        clean_content_tags={"script", "style"},
        attributes={k: set(v) for k, v in ALLOWED_ATTRIBUTES.items()},
        url_schemes=set(ALLOWED_URL_SCHEMES),
        link_rel="nofollow noopener noreferrer",
        strip_comments=True,
        attribute_filter=_keep_attribute,
    )
    return Markup(clean)


def _description(text: Any, limit: int) -> tuple[Markup, str]:
    """``(render_markdown(text), summary_text(text, limit))`` from ONE Markdown parse (the
    site needs both for every entry; parsing is most of the Markdown cost)."""
    if not isinstance(text, str) or not text:
        return Markup(""), ""
    tokens = _MD.parse(text)
    return _sanitise(_MD.renderer.render(tokens, _MD.options, {})), _summary(tokens, limit)


def _keep_attribute(tag: str, attr: str, value: str) -> str | None:
    """nh3 attribute filter: drop network-path references (``//host/x``, ``\\\\host\\x``), which
    the scheme allowlist cannot see and which a ``file://`` page would resolve to a remote
    (SMB on Windows) host."""
    if attr == "href" and (value.startswith(("//", "\\")) or "\\" in value):
        return None
    return value


def summary_text(text: str, limit: int = 240) -> str:
    """The plain text of the first block of Markdown ``text`` (inline markup removed), cut to
    ``limit`` characters with an ellipsis: what the front page shows under each entry.
    Returned as plain text (the template escapes it)."""
    if not isinstance(text, str) or not text:
        return ""
    return _summary(_MD.parse(text), limit)


def _summary(tokens: list, limit: int) -> str:
    """:func:`summary_text` from markdown-it ``tokens``."""
    parts: list[str] = []
    for tok in tokens:
        if tok.type == "inline":
            for child in tok.children or ():
                if child.type in ("text", "code_inline"):
                    parts.append(child.content)
                elif child.type in ("softbreak", "hardbreak"):
                    parts.append(" ")
            break
    out = " ".join("".join(parts).split())
    return out if len(out) <= limit else out[: limit - 1].rstrip() + "\u2026"


def entry_slug(entry_id: str) -> str:
    """The file name stem of an entry's page: ``recipe:hello-engine`` -> ``recipe-hello-engine``.

    ``:`` becomes ``-``; any character outside ``[A-Za-z0-9._-]`` becomes ``_``; when that
    changed anything beyond the ``:`` (so two ids could meet), the first 8 hex digits of the
    id's sha256 are appended. A leading dot is replaced too (no hidden files)."""
    kind, sep, rest = entry_id.partition(":")
    raw = f"{kind}-{rest}" if sep else entry_id
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", raw)
    if safe.startswith("."):
        safe = "_" + safe[1:]
    if safe != raw or safe.startswith("_") or not safe:
        safe = f"{safe}-{Digest.of_bytes(entry_id.encode('utf-8')).hex[:8]}"
    return safe


def entry_facets(entry: dict[str, Any]) -> dict[str, list[str]]:
    """Each facet's values for one entry (strings, de-duplicated, sorted), the same rule the
    search uses: platform facets (os, accelerator, gpu_arch) are the set over all platforms;
    ``official`` is ``"true"``/``"false"``; statuses are taken from their objects."""
    platforms = entry.get("platforms") or []
    values: dict[str, Iterable[Any]] = {
        "kind": [entry.get("kind")],
        "capability": entry.get("capabilities") or [],
        "os": [p.get("os") for p in platforms],
        "accelerator": [p.get("accelerator") for p in platforms],
        "gpu_arch": [a for p in platforms for a in (p.get("archs") or [])],
        "official": ["true" if entry.get("official") else "false"],
        "signature": [(entry.get("signature") or {}).get("status")],
        "pinning": [(entry.get("pinning") or {}).get("status")],
        "reproducible": [(entry.get("reproducible") or {}).get("status")],
        "publisher": [entry.get("publisher")],
    }
    return {k: sorted({v for v in vs if isinstance(v, str) and v}) for k, vs in values.items()}


def _facet_options(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per facet: ``{"key", "label", "options": [{"value", "label", "count"}]}`` sorted by value
    (``official`` as true first with labels official / community)."""
    from lemonpack.catalogue.search import runs_on_arch

    counts: dict[str, dict[str, int]] = {k: {} for k, _ in FACETS}
    for e in entries:
        for key, vals in entry_facets(e).items():
            for v in vals:
                counts[key][v] = counts[key].get(v, 0) + 1
    # the GPU arch facet counts the entries that run on the arch (the search's rule), listed or not
    counts["gpu_arch"] = {a: sum(1 for e in entries if runs_on_arch(e, a)) for a in counts["gpu_arch"]}
    out = []
    for key, label in FACETS:
        values = sorted(counts[key])
        if key == "official":
            values = [v for v in ("true", "false") if v in counts[key]]
        names = {"true": "official", "false": "community"} if key == "official" else {}
        out.append({"key": key, "label": label,
                    "options": [{"value": v, "label": names.get(v, v), "count": counts[key][v]}
                                for v in values]})
    return out


def _safe_href(url: Any) -> str | None:
    """``url`` when it is an absolute http(s) URL (for homepages), else None."""
    if isinstance(url, str) and re.match(r"^https?://[^\s<>\"']+$", url, re.IGNORECASE):
        return url
    return None


_SIGNATURE_LABELS = {"verified": "signature verified", "unknown-key": "signed by an unknown key",
                     "in-tree": "official, in-tree", "unavailable": "signature unavailable"}
_PINNING_LABELS = {"all": "all pinned", "partly": "partly pinned"}
_REPRO_LABELS = {"reproduced": "rebuild reproduced", "differs": "rebuild differs"}


def _label(table: dict[str, str], otherwise: str):
    def label(status: Any) -> str:
        return table.get(status, otherwise) if isinstance(status, str) else otherwise
    return label


def _badge(kind: str, value: Any, label: Any = None) -> Markup:
    """``<span class="badge KIND-VALUE">LABEL</span>``, escaped (a plain function: Jinja
    macros cost a context per call, and the front page has three badges per entry)."""
    text = value if label is None else label
    return Markup(f'<span class="badge {escape(kind)}-{escape(value)}">{escape(text)}</span>')


def _finalize(value: Any) -> Any:
    """Every ``{{ value }}``: bidirectional controls written visibly (:func:`visible_bidi`), so an
    unterminated U+202E from a publisher cannot reverse the text after it; names are also
    isolated with ``<bdi>`` in the templates."""
    if isinstance(value, Markup):
        return Markup(visible_bidi(str(value))) if BIDI_CONTROLS.search(value) else value
    if isinstance(value, str) and BIDI_CONTROLS.search(value):
        return visible_bidi(value)
    return value


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        finalize=_finalize,
        loader=jinja2.PackageLoader("lemonpack.catalogue", "templates"),
        autoescape=True,
        undefined=jinja2.ChainableUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["slug"] = entry_slug
    env.filters["safe_href"] = _safe_href
    env.filters["nobidi"] = visible_bidi
    env.globals.update(badge=_badge, command_order=COMMAND_ORDER, signature_label=_label(_SIGNATURE_LABELS, "unsigned"),
                       pinning_label=_label(_PINNING_LABELS, "not pinned"),
                       repro_label=_label(_REPRO_LABELS, "reproducibility not checked"))
    return env


#: The entry fields of the page data, in the order of each entry's array (:func:`page_data`).
PAGE_FIELDS: tuple[str, ...] = ("id", "kind", "name", "display_name", "official", "publisher", "description",
                                "tags", "capabilities", "default_accelerator", "platforms", "signature",
                                "pinning", "reproducible", "added", "updated", "memory", "slug", "summary",
                                "version", "license")


def page_data(index: dict[str, Any], summaries: list[str] | None = None) -> dict[str, Any]:
    """What ``assets/catalogue-data.js`` holds: ``{"format": "lemonpack-catalogue-page/1",
    "schema", "generated", "fields": PAGE_FIELDS, "entries": [[value per field], ...]}`` in
    index order. Values are the index's own (``null`` when absent), except ``platforms`` =
    ``[[os, accelerator, [concrete archs], any_arch], ...]`` and ``signature`` / ``pinning`` /
    ``reproducible`` = their ``status`` string, and ``added`` / ``updated`` the dates of the
    first and latest version (:func:`lemonpack.catalogue.search.entry_dates`, what the sort
    orders read), and ``memory`` a model entry's estimate in bytes (what its fit reads). That is every field the search (docs/catalogue.md
    "Search semantics"), the facets and the host fit read, about 40 % of ``catalogue.json``
    (digests, sources, commands, pins and fingerprints stay in the index and entry pages);
    ``summaries``: each entry's :func:`summary_text` (160 characters) when the caller has them;
    site.js turns each array back into an object with these keys; ``slug``, ``summary``,
    ``version`` and ``license`` (with ``labels``, the badge texts) are what it needs to build a
    list item as ``templates/item.html`` does, for results beyond the :data:`FRONT_ITEMS`
    entries ``index.html`` holds (``front``). The search vocabulary
    (arch families, synonyms, phrases) is ``assets/search-rules.js``: the CLI's own table,
    :func:`lemonpack.catalogue.search.rules`."""
    from lemonpack.catalogue.search import entry_dates

    def status(v: Any) -> Any:
        return v.get("status") if isinstance(v, dict) else None

    rows = []
    entries = [e for e in index.get("entries") or [] if isinstance(e, dict)]
    if summaries is None or len(summaries) != len(entries):
        summaries = [_description(e.get("description"), 160)[1] for e in entries]
    for e, summary in zip(entries, summaries):
        row = [e.get(k) for k in PAGE_FIELDS[:10]]
        row.append([[p.get("os"), p.get("accelerator"), p.get("archs") or [],
                     bool(p.get("any_arch", not p.get("archs")))]
                    for p in e.get("platforms") or [] if isinstance(p, dict)])
        row += [status(e.get("signature")), status(e.get("pinning")), status(e.get("reproducible"))]
        row += list(entry_dates(e))
        row.append(((e.get("model") or {}).get("memory") or {}).get("bytes"))  # a model entry's estimate
        # what a list item shows beyond the search fields (site.js builds items as item.html does)
        row += [entry_slug(str(e.get("id", ""))), summary, e.get("version"),
                e.get("license")]
        rows.append(row)
    labels = {"signature": [_SIGNATURE_LABELS, "unsigned"], "pinning": [_PINNING_LABELS, "not pinned"],
              "reproducible": [_REPRO_LABELS, "reproducibility not checked"]}
    return {"format": "lemonpack-catalogue-page/1", "schema": index.get("schema"),
            "generated": index.get("generated"), "fields": list(PAGE_FIELDS), "entries": rows, "labels": labels,
            "front": FRONT_ITEMS}


def _asset(name: str) -> bytes:
    return resources.files("lemonpack.catalogue").joinpath("static", name).read_bytes()


FRONT_ITEMS = 50  #: entries listed in ``index.html`` itself (all of them: ``all.html``)


class SiteFile:
    """One file of the site: ``rel`` (posix path) and ``data`` (its bytes), or ``key`` (what it
    is made from) and ``render`` (its bytes, made only when needed: :class:`.memo.Writer`)."""

    __slots__ = ("rel", "data", "key", "render")

    def __init__(self, rel: str, data: bytes | None = None, key: str | None = None, render: Any = None):
        self.rel, self.data, self.key, self.render = rel, data, key, render

    def content(self) -> bytes:
        """The file's bytes (rendered now when only a ``render`` function is known)."""
        return self.data if self.data is not None else self.render()


def _canonical_entry(entry: Any) -> bytes:
    return canonical_json(entry, floats="shortest")


def site_outputs(index: dict[str, Any], index_digest: str | None = None, cache: Any = None,
                 entry_bytes: list[bytes] | None = None, index_key: str | None = None):
    """Every file of the site as :class:`SiteFile` objects, one at a time (see the module
    docstring): nothing holds all pages at once. ``index_digest``: the digest of the ``catalogue.json`` bytes (shown for official in-tree
    entries); ``cache``: a :class:`lemonpack.catalogue.memo.PageCache` (or None) holding the
    rendered list items and the sha256 of earlier pages by the sha256 of everything they are
    made of (:func:`_fragment_key`), so an unchanged entry is not rendered again;
    ``entry_bytes``: each entry's canonical JSON (sorted keys, compact), when the caller has
    it; ``index_key``: a digest naming the whole index (the sha256 of ``catalogue.json``),
    which keys the files made from all entries (``index.html``, ``all.html``, the data
    scripts). Pure: same index, same bytes, with or without a cache. Raises ``TypeError``
    for a value JSON cannot hold."""
    entries = [e for e in index.get("entries") or [] if isinstance(e, dict)]
    if entry_bytes is None or len(entry_bytes) != len(entries):
        entry_bytes = [_canonical_entry(e) for e in entries]
    publishers = {p.get("id"): p for p in index.get("publishers") or [] if isinstance(p, dict)}
    pub_bytes: dict[Any, bytes] = {}
    env = _environment()
    common: dict[str, Any] = {"generated": index.get("generated") or "", "schema": index.get("schema"),
              "publishers": publishers, "index_digest": index_digest}
    head = _canonical_entry([common["generated"], common["schema"]])
    item_tpl, page = env.get_template("item.html"), env.get_template("entry.html")
    items: list[str] = []
    summaries: list[str] = []
    for entry, eb in zip(entries, entry_bytes):
        slug = entry_slug(str(entry.get("id", "")))
        pid = entry.get("publisher")
        publisher = publishers.get(pid)
        if pid not in pub_bytes:
            pub_bytes[pid] = _canonical_entry(publisher)
        in_tree = (entry.get("signature") or {}).get("status") == "in-tree"
        key = _fragment_key(eb, pub_bytes[pid], head, index_digest if in_tree else None)
        hit = cache.item("item:" + key) if cache is not None else None
        if isinstance(hit, list) and len(hit) == 2:
            item, summary = hit
        else:
            summary = _description(entry.get("description"), 160)[1]
            item = item_tpl.render(e=entry, slug=slug, summary=summary)
            if cache is not None:
                cache.remember_item("item:" + key, [item, summary])
        items.append(item)
        summaries.append(summary)

        def render_page(entry=entry, slug=slug, publisher=publisher) -> bytes:
            description = _description(entry.get("description"), 160)[0]
            return page.render(**common, csp=_CSP_ENTRY, root="../", entry=entry, slug=slug, description=description,
                               facets=entry_facets(entry), publisher=publisher,
                               platform_installs=_platform_installs(entry)).encode("utf-8")
        yield SiteFile(f"entry/{slug}.html", key="page:" + key, render=render_page)

    def whole(rel: str, render) -> SiteFile:
        return SiteFile(rel, data=render()) if index_key is None else SiteFile(rel, key=f"file:{rel}:{index_key}",
                                                                                render=render)

    def front() -> bytes:
        return env.get_template("index.html").render(
            **common, csp=_CSP_INDEX, root="", items=[Markup(i) for i in items[:FRONT_ITEMS]], total=len(items),
            facets=_facet_options(entries), skip_to="results", skip_label="results",
            rejected=index.get("rejected") or [], all_page=len(items) > FRONT_ITEMS).encode("utf-8")

    def every() -> bytes:
        return env.get_template("all.html").render(**common, csp=_CSP_ENTRY, root="", items=[Markup(i) for i in items],
                                                   skip_to="entries", skip_label="the list").encode("utf-8")

    def data() -> bytes:
        return b"window.CATALOGUE = " + canonical_json(page_data(index, summaries)) + b";\n"

    yield whole("index.html", front)
    yield whole("all.html", every)
    yield whole("assets/catalogue-data.js", data)
    from lemonpack.catalogue.search import rules

    yield SiteFile("assets/search-rules.js", data=b"window.CATALOGUE_RULES = " + canonical_json(rules()) + b";\n")
    for name in ("site.js", "site.css", "copy.js"):
        yield SiteFile(f"assets/{name}", data=_asset(name))


def site_files(index: dict[str, Any], index_digest: str | None = None, cache: Any = None) -> dict[str, bytes]:
    """Every file of the site as ``{relative posix path: bytes}`` (:func:`site_outputs`, each
    rendered)."""
    return {f.rel: f.content() for f in site_outputs(index, index_digest, cache)}


def _platform_installs(entry: dict) -> dict[str, str]:
    """:func:`lemonpack.catalogue.fits.platform_installs` (empty for an entry whose platforms
    are not index-shaped: a page is rendered for anything the index holds)."""
    from lemonpack.catalogue.fits import platform_installs

    try:
        return platform_installs(entry)
    except (KeyError, TypeError, AttributeError):
        return {}


def _fragment_key(entry_bytes: bytes, publisher_bytes: bytes, head: bytes, index_digest: str | None) -> str:
    """sha256 of what an entry's page and list item are rendered from: the entry's and its
    publisher's canonical JSON, the index's date and schema (``head``) and, for an official
    in-tree entry, the index digest (the templates are the cache owner's concern:
    :mod:`lemonpack.catalogue.memo` drops its cache when code changes)."""
    from lemonpack.digest import Hasher

    h = Hasher()
    for part in (entry_bytes, publisher_bytes, head, (index_digest or "").encode()):
        h.write(len(part).to_bytes(8, "big") + part)
    return h.digest().hex


def render_site(index: dict[str, Any], out: Path, index_digest: str | None = None, cache: Any = None,
                atomic: bool = True, writer: Any = None, entry_bytes: list[bytes] | None = None,
                index_key: str | None = None) -> None:
    """Write the static site for catalogue ``index`` (catalogue.json's shape) into ``out``.

    Writes :func:`site_outputs`' files, each atomically (``atomic=False``: plain writes, for a
    fresh directory the caller swaps in; ``writer``: a :class:`.memo.Writer` into one, taking
    unchanged files from the previous output); removes ``entry/*.html`` files left from an
    earlier index (not with a ``writer``). Leaves
    every other file in ``out`` alone. Raises :class:`~lemonpack.errors.StorageError` when a
    file cannot be written (naming it)."""
    out = Path(out)
    keep: set[str] = set()
    try:
        (out / "entry").mkdir(parents=True, exist_ok=True)
        (out / "assets").mkdir(parents=True, exist_ok=True)
        for f in site_outputs(index, index_digest, cache, entry_bytes, index_key):
            if f.rel.startswith("entry/"):
                keep.add(f.rel.split("/", 1)[1])
            if writer is not None:
                writer.put(f.rel, f.data, f.key, f.render)
            elif atomic:
                replace_file(out / f.rel, f.content(), mode=0o644)
            else:  # a fresh directory swapped in as a whole (catalogue build): plain writes
                with os.fdopen(os.open(out / f.rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb") as fh:
                    fh.write(f.content())
        if writer is None:
            for old in sorted((out / "entry").glob("*.html")):
                if old.name not in keep and old.is_file() and not old.is_symlink():
                    old.unlink()
    except OSError as e:
        raise StorageError(f"cannot write the catalogue site under {out}: {e}") from e
