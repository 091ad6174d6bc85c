"""The catalogue's static site at the Python level: files, escaping and sanitising of hostile
community input, no external references, byte-reproducibility. (The page's behaviour in a
real browser is tests/scenarios/test_catalogue_site_browser.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from support.catalogue_site import HOSTILE_DESCRIPTION, hostile_index, load_fixture, parse

from lemonpack.catalogue.site import PAGE_FIELDS, entry_slug, render_markdown, render_site
from lemonpack.errors import StorageError
from lemonpack.canonical import canonical_json


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_site_has_front_page_entry_pages_and_assets(tmp_path):
    index = load_fixture()
    render_site(index, tmp_path)
    files = tree(tmp_path)
    slugs = [entry_slug(e["id"]) for e in index["entries"]]
    assert sorted(files) == sorted(["index.html", "all.html", "assets/catalogue-data.js", "assets/search-rules.js", "assets/site.js", "assets/copy.js",
                                   "assets/site.css"]
                                   + [f"entry/{s}.html" for s in slugs])
    # The data script is the page data, canonical: per entry, in index order, the fields the
    # search, the facets and the host fit read (digests, sources, commands stay out).
    data = files["assets/catalogue-data.js"]
    assert data.startswith(b"window.CATALOGUE = ") and data.endswith(b";\n")
    page = json.loads(data[len(b"window.CATALOGUE = "):-2])
    assert data == b"window.CATALOGUE = " + canonical_json(page) + b";\n"
    assert page["fields"] == list(PAGE_FIELDS)
    rows = [dict(zip(page["fields"], row)) for row in page["entries"]]
    assert [r["id"] for r in rows] == [e["id"] for e in index["entries"]]
    for r, e in zip(rows, index["entries"]):
        for k in ("kind", "name", "display_name", "official", "publisher", "description", "tags", "capabilities"):
            assert r[k] == e[k], k
        assert r["platforms"] == [[p["os"], p["accelerator"], p["archs"], p.get("any_arch", not p["archs"])]
                                  for p in e["platforms"]]
        assert [r["signature"], r["pinning"], r["reproducible"]] == [e[k]["status"] for k in
                                                                     ("signature", "pinning", "reproducible")]
    assert index["entries"][0]["digest"].encode() not in data
    assert len(data) < len(canonical_json(index)) * 0.6
    # With JavaScript off the whole list is in the HTML, in index order, each linking its page.
    doc = parse(files["index.html"])
    ids = [a["data-id"] for t, a in doc.elements if t == "li" and "entry" in (a.get("class") or "").split()]
    assert ids == [e["id"] for e in index["entries"]]
    links = [a["href"] for t, a in doc.elements if t == "a" and a.get("href", "").startswith("entry/")]
    assert links == [f"entry/{s}.html" for s in slugs]
    # The only scripts are the three local assets, in this order.
    assert [a.get("src") for t, a in doc.elements if t == "script"] == [
        "assets/catalogue-data.js", "assets/search-rules.js", "assets/site.js"]


def test_facets_offer_every_value_of_the_index(tmp_path):
    index = load_fixture()
    render_site(index, tmp_path)
    doc = parse((tmp_path / "index.html").read_bytes())
    offered: dict[str, list[str]] = {}
    for t, a in doc.elements:
        if t == "input" and a.get("type") == "checkbox" and a.get("name") not in (None, "fits"):
            offered.setdefault(a["name"], []).append(a["value"])
    archs = sorted({a for e in index["entries"] for p in e["platforms"] for a in p["archs"]})
    assert offered["gpu_arch"] == archs and "gfx1151" in archs  # concrete archs, globs expanded by the index
    assert "gfx115*" not in offered["gpu_arch"]
    assert offered["kind"] == ["extension", "recipe"]
    assert offered["official"] == ["true", "false"]
    assert offered["publisher"] == sorted({e["publisher"] for e in index["entries"]})
    assert offered["signature"] == ["unknown-key", "unsigned", "verified"]
    assert offered["os"] == ["darwin", "linux", "windows"]
    assert set(offered) == {"kind", "capability", "os", "accelerator", "gpu_arch", "official", "signature",
                            "pinning", "reproducible", "publisher"}


def test_entry_page_shows_digests_commands_signature_platforms(tmp_path):
    index = load_fixture()
    render_site(index, tmp_path)
    e = next(x for x in index["entries"] if x["id"] == "recipe:acme-strix-toolbox")
    html = (tmp_path / "entry" / f"{entry_slug(e['id'])}.html").read_text()
    text = " ".join("".join(parse(html).text).split())
    for needle in (e["digest"], e["commands"]["install"], e["commands"]["run"], e["commands"]["nix"],
                   e["signature"]["fingerprint"], "signed by an unknown key", e["source"]["ref"],
                   "gfx1150, gfx1151, gfx1152, gfx1153", "gfx115*", *e["capabilities"],
                   *(img["ref"] for img in e["pinning"]["images"])):
        assert needle in text, needle
    # Versions newest first with their dates; the one script is the site's copy button, and the
    # policy allows the site's own scripts only (no inline script, nothing from elsewhere).
    assert "b22026-01-20" in text and text.index("b22026-01-20") < text.index("b12025-12-01")  # adjacent cells
    doc = parse(html)
    assert [a.get("src") for t, a in doc.elements if t == "script"] == ["../assets/copy.js"]
    csp = next(a["content"] for t, a in doc.elements if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in csp and "script-src 'self';" in csp and "unsafe-inline" not in csp


def _hrefs_and_srcs(html: bytes) -> list[tuple[str, str, str]]:
    return [(t, k, v or "") for t, a in parse(html).elements for k, v in a.items() if k in ("href", "src", "action")]


def test_hostile_description_and_fields_are_inert(tmp_path):
    index = hostile_index()
    render_site(index, tmp_path)
    page = (tmp_path / "entry" / f"{entry_slug('recipe:evil-engine')}.html").read_bytes()
    front = (tmp_path / "index.html").read_bytes()
    for html in (page, front):
        doc = parse(html)
        tags = [t for t, _ in doc.elements]
        for bad in ("img", "svg", "iframe", "style", "object", "embed", "form" if html is page else "svg"):
            assert bad not in tags, bad
        scripts = [a.get("src") for t, a in doc.elements if t == "script"]
        # an entry page's one script is the local copy-button script (it reads the page's own text)
        assert scripts == (["../assets/copy.js"] if html is page
                           else ["assets/catalogue-data.js", "assets/search-rules.js", "assets/site.js"])
        for t, attrs in doc.elements:
            assert not [k for k in attrs if k.lower().startswith("on")], (t, attrs)
        for t, k, v in _hrefs_and_srcs(html):
            scheme = urlsplit(v.strip()).scheme.lower()
            assert scheme in ("", "http", "https"), (t, k, v)
            assert not v.startswith("//"), v
    # The raw HTML of the description is shown as text, not interpreted.
    text = "".join(parse(page).text)
    assert "<script>window.__pwned=1</script>" in text
    assert "javascript:" not in " ".join(v for _, _, v in _hrefs_and_srcs(page))
    # Allowed formatting and safe links survive, with rel hardening.
    assert b"<strong>kernels</strong>" in page
    assert b'<a href="https://ok.example/hostile-docs" rel="nofollow noopener noreferrer">docs</a>' in page
    assert b'<a href="notes.html" rel="nofollow noopener noreferrer">relative</a>' in page
    # A javascript: homepage is not linked.
    assert b"homepage</a>" not in page


@pytest.mark.parametrize("src", [
    "<script>alert(1)</script>", '<img src=x onerror="alert(1)">', "[x](javascript:alert(1))",
    "[x](JAVASCRIPT:alert(1))", "[x](data:text/html,<script>alert(1)</script>)", "<javascript:alert(1)>",
    "[x][r]\n\n[r]: javascript:alert(1)", '<a href="javascript:alert(1)">x</a>', "[x](vbscript:alert(1))",
    "[x](file:///etc/passwd)", "[x](//evil.example/)", '<p onclick="alert(1)">x</p>', "![x](https://t.example/p.gif)",
    '[x](https://ok.example "t\\" onclick=\\"alert(1)")',
])
def test_render_markdown_drops_active_content(src):
    doc = parse(str(render_markdown(src)))
    for t, attrs in doc.elements:
        assert t in ("p", "a", "strong", "em", "code"), t
        assert set(attrs) <= {"href", "title", "rel"}, attrs
        href = attrs.get("href")
        if href is not None:
            assert urlsplit(href).scheme in ("", "http", "https") and not href.startswith("//"), href


def test_render_markdown_keeps_ordinary_formatting():
    html = str(render_markdown("# T\n\n*a* **b** `c`\n\n- one\n- two\n\n| x | y |\n|---|---|\n| 1 | 2 |\n\n"
                               "```\ncode <b>\n```\n\n[l](https://ok.example/a?b=1&c=2)"))
    for piece in ("<h1>T</h1>", "<em>a</em>", "<strong>b</strong>", "<code>c</code>", "<li>one</li>", "<td>2</td>",
                  "code &lt;b&gt;", 'href="https://ok.example/a?b=1&amp;c=2"'):
        assert piece in html, piece


EXTERNAL = re.compile(r"(?i)\b(?:https?|ftp|wss?):|//[a-z0-9.-]+\.[a-z]{2,}")


def test_no_external_references_except_entry_links(tmp_path):
    index = hostile_index()
    render_site(index, tmp_path)
    files = tree(tmp_path)
    # Assets: no URL at all, no network API, no CSS imports or remote fonts.
    css, js = files["assets/site.css"].decode(), files["assets/site.js"].decode()
    assert not EXTERNAL.search(css) and "url(" not in css and "@import" not in css and "@font-face" not in css
    code = re.sub(r"/\*.*?\*/", "", js, flags=re.S)
    assert not EXTERNAL.search(code)
    for api in ("fetch(", "XMLHttpRequest", "WebSocket", "sendBeacon", "EventSource", "import(", "innerHTML",
                "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert api not in code, api
    # Pages: every src / stylesheet is local; absolute URLs only in <a> links the entry itself supplied.
    allowed = set()
    for e in index["entries"]:
        allowed.add(e["homepage"])
        allowed.update(re.findall(r"\]\((https?://[^ )]+)", e["description"]))
        allowed.update(re.findall(r"<(https?://[^>]+)>", e["description"]))
    for rel, data in files.items():
        if not rel.endswith(".html"):
            continue
        for tag, attr, value in _hrefs_and_srcs(data):
            if tag == "a" and urlsplit(value).scheme in ("http", "https"):
                assert value in allowed, (rel, value)
            else:
                assert not urlsplit(value).scheme and not value.startswith("//"), (rel, tag, attr, value)


def test_output_is_byte_reproducible(tmp_path):
    index = hostile_index()
    render_site(index, tmp_path / "a")
    # Same data with every object's keys in reverse order: same bytes.
    def reverse(o):
        if isinstance(o, dict):
            return {k: reverse(o[k]) for k in reversed(list(o))}
        if isinstance(o, list):
            return [reverse(x) for x in o]
        return o
    render_site(json.loads(json.dumps(reverse(index))), tmp_path / "b")
    a, b = tree(tmp_path / "a"), tree(tmp_path / "b")
    assert a == b
    # No clock in the output: the only dates are the index's and its entries' version dates.
    stamp = re.compile(rb"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")
    dates = {m for data in a.values() for m in stamp.findall(data)}
    assert dates == {index["generated"][:16].encode()} | {
        h["date"][:16].encode() for e in index["entries"] for h in e.get("history", [])}


def test_rerender_removes_pages_of_dropped_entries_and_keeps_other_files(tmp_path):
    index = hostile_index()
    render_site(index, tmp_path)
    (tmp_path / "catalogue.json").write_text("{}")  # cat-core's files are not ours to touch
    evil = tmp_path / "entry" / f"{entry_slug('recipe:evil-engine')}.html"
    assert evil.is_file()
    render_site(load_fixture(), tmp_path)
    assert not evil.exists()
    assert (tmp_path / "catalogue.json").read_text() == "{}"
    assert tree(tmp_path)["index.html"].count(b'class="entry"') == len(load_fixture()["entries"])
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_unwritable_output_is_a_storage_error(tmp_path):
    blocker = tmp_path / "out"
    blocker.write_text("a file, not a directory")
    with pytest.raises(StorageError, match="out"):
        render_site(load_fixture(), blocker)


@pytest.mark.parametrize("entry_id,slug", [
    ("recipe:hello-engine", "recipe-hello-engine"), ("extension:acme_moe", "extension-acme_moe"),
])
def test_slugs(entry_id, slug):
    assert entry_slug(entry_id) == slug


def test_slugs_of_unusual_ids_stay_inside_entry_dir_and_unique():
    ids = ["recipe:../../x", "recipe:a/b", "recipe:a_b", "recipe:.hidden", "recipe:a b", "recipe:a?b"]
    slugs = [entry_slug(i) for i in ids]
    assert len(set(slugs)) == len(slugs)
    for s in slugs:
        assert re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", s), s
        assert ".." not in s.split("/") and "/" not in s


def test_hostile_markdown_fixture_is_really_hostile():
    # Guard against the fixture silently losing its teeth.
    for needle in ("<script>", "onerror=", "javascript:", "data:text/html", "//evil.example", "<iframe"):
        assert needle in HOSTILE_DESCRIPTION
