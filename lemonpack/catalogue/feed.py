"""``feed.atom``: an Atom 1.0 feed (RFC 4287) of a catalogue index.

One ``<entry>`` per catalogue entry in index order, its ``<id>`` a URN of the entry id and
digest (a changed entry is a new feed entry), ``<updated>`` the index date; one per rejected
source. Written as text with XML escaping (``xml.sax.saxutils``) rather than built as an
``ElementTree`` (a tree of 5,000 entries and its indentation cost most of a warm build's
feed time); characters XML 1.0 cannot carry (C0 controls other than tab and line breaks) are
dropped. Deterministic bytes, two-space indentation as ``ElementTree.indent`` writes it.
"""

from __future__ import annotations

import re
from xml.sax.saxutils import escape

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value: object) -> str:
    return escape(_NOT_XML.sub("", str(value)))


def _attr(value: object) -> str:
    return escape(_NOT_XML.sub("", str(value)), {'"': "&quot;", "\n": "&#10;", "\t": "&#09;", "\r": "&#13;"})


def atom_feed(index: dict) -> bytes:
    """The feed of ``index`` (``catalogue.json``'s shape) as UTF-8 bytes (see the module docstring)."""
    from lemonpack.catalogue.names import entry_filename

    updated = _text(index["generated"])
    out = ["<?xml version='1.0' encoding='utf-8'?>", '<feed xmlns="http://www.w3.org/2005/Atom">',
           "  <title>lemonpack catalogue</title>", "  <id>urn:lemonpack:catalogue</id>",
           f"  <updated>{updated}</updated>", "  <author>", "    <name>lemonpack catalogue build</name>",
           "  </author>"]
    for e in index["entries"]:
        title = f"{e['id']} {e.get('version') or ''}".strip()
        summary = (f"{e['display_name']} \u2014 signature {e['signature']['status']}, pinning {e['pinning']['status']}, "
                   f"reproducible {e['reproducible']['status']}, digest {e['digest']}")
        out += ["  <entry>", f"    <title>{_text(title)}</title>",
                f"    <id>urn:lemonpack:catalogue:{_text(e['id'])}:{_text(e['digest'])}</id>",
                f"    <updated>{updated}</updated>", "    <author>", f"      <name>{_text(e['publisher'])}</name>",
                "    </author>", f'    <link rel="alternate" href="{_attr("entries/" + entry_filename(e["id"]))}" />',
                f'    <category term="{_attr(e["kind"])}" />', f"    <summary>{_text(summary)}</summary>", "  </entry>"]
    for r in index["rejected"]:
        out += ["  <entry>", f"    <title>rejected: {_text(r['id'])}</title>",
                f"    <id>urn:lemonpack:catalogue:rejected:{_text(r['file'])}</id>",
                f"    <updated>{updated}</updated>", f"    <summary>{_text('; '.join(r['reasons']))}</summary>",
                "  </entry>"]
    out.append("</feed>")
    return "\n".join(out).encode("utf-8") + b"\n"
