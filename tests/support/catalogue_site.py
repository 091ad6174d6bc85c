"""Shared pieces of the catalogue site tests: the fixture index, a hostile community entry, an
HTML reader that lists every element with its attributes, and the reference facet rule."""

from __future__ import annotations

import copy
import json
from html.parser import HTMLParser
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "catalogue"  # the shared index and query table
FIXTURE = HERE / "fixture-catalogue.json"
QUERIES = HERE / "queries.json"

#: A page flag: any script the hostile entry manages to run sets it.
PWN = "window.__pwned=1"

HOSTILE_DESCRIPTION = "\n\n".join([
    "Fast **kernels**. <script>window.__pwned=1</script>",
    '<img src="x" onerror="window.__pwned=1"> <svg onload="window.__pwned=1"></svg>',
    "[click me](javascript:window.__pwned=1) [or me](JaVaScRiPt:window.__pwned=1)",
    '<a href="javascript:window.__pwned=1">raw link</a> <div onmouseover="window.__pwned=1">hover</div>',
    "[data](data:text/html;base64,PHNjcmlwdD53aW5kb3cuX19wd25lZD0xPC9zY3JpcHQ+) <javascript:window.__pwned=1>",
    "[tab](jav&#x09;ascript:window.__pwned=1) [net](//evil.example/x) [vb](vbscript:window.__pwned=1)",
    '[title](https://ok.example/docs "x\\" onmouseover=\\"window.__pwned=1")',
    "![pixel](https://tracker.example/p.gif) <iframe src=\"javascript:window.__pwned=1\"></iframe>",
    "<style>body{background:url(https://tracker.example/bg)}</style> <!-- comment -->",
    "[docs](https://ok.example/hostile-docs) and [relative](notes.html)",
])


def load_fixture() -> dict:
    """A fresh copy of the shared fixture index (tests/catalogue/fixture-catalogue.json)."""
    return json.loads(FIXTURE.read_text())


def hostile_index() -> dict:
    """The fixture index plus one community recipe whose every free-text field is hostile."""
    index = load_fixture()
    base = next(e for e in index["entries"] if e["id"] == "recipe:beta-whisper-cuda")
    e = copy.deepcopy(base)
    e.update({
        "id": "recipe:evil-engine", "name": "evil-engine",
        "display_name": '<img src=x onerror="window.__pwned=1">Evil"><script>window.__pwned=1</script>',
        "description": HOSTILE_DESCRIPTION,
        "homepage": "javascript:window.__pwned=1",
        "license": "<b onmouseover=window.__pwned=1>MIT</b>",
        "tags": ['"><script>window.__pwned=1</script>', "evil"],
        "capabilities": ['x"><img src=x onerror=window.__pwned=1>'],
        "version": "</script><script>window.__pwned=1</script>",
        "commands": {"install": "lemonpack install evil-engine; <script>window.__pwned=1</script>",
                     "run": "lemonpack run evil-engine", "nix": "nix build .#evil-engine"},
        "source": {"type": "https", "url": "https://example.invalid/evil.json\"><script>window.__pwned=1</script>"},
    })
    index["entries"].append(e)
    return index


class Elements(HTMLParser):
    """Every start tag as ``(tag, {attr: value})`` plus the document's text, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(html: str | bytes) -> Elements:
    """Parse ``html`` (bytes are UTF-8) into :class:`Elements`."""
    p = Elements()
    p.feed(html.decode("utf-8") if isinstance(html, bytes) else html)
    p.close()
    return p


def runs_on(entry: dict, arch: str) -> bool:
    """An entry runs on GPU ``arch``: some platform lists it, or runs on every arch
    (``any_arch``, else: lists none) and ``arch`` is one of its accelerator's in the arch table."""
    from lemonpack.catalogue.archs import KNOWN_ARCHS

    for p in entry["platforms"]:
        if arch in p["archs"] or (p.get("any_arch", not p["archs"]) and arch in KNOWN_ARCHS.get(p["accelerator"], ())):
            return True
    return False


def reference_search(index: dict, query: str, filters: dict) -> list[str]:
    """The catalogue's search semantics (README) written out plainly in Python, the oracle the facet
    tests compare the page with (the shared query table checks it against cat-core's CLI)."""
    from lemonpack.catalogue.site import entry_facets

    terms = query.lower().split()
    out = []
    for e in index["entries"]:
        fields = [e["id"], e["name"], e["display_name"], e["publisher"], *e["tags"], *e["capabilities"],
                  e["description"]]
        fields = [f.lower() for f in fields]
        if not all(any(t in f for f in fields) for t in terms):
            continue
        facets = entry_facets(e)
        ok = True
        for key, want in filters.items():
            want = want if isinstance(want, list) else [want]
            want = [("true" if w else "false") if isinstance(w, bool) else w for w in want]
            if key == "gpu_arch":  # runs on the arch: listed, or any arch of an any-arch platform's accelerator
                if not any(runs_on(e, a) for a in want):
                    ok = False
            elif not set(want) & set(facets[key]):
                ok = False
        if ok:
            out.append(e["id"])
    return out
