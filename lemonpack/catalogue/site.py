"""Stub of the static site (cat-site replaces this module with the real one).

:func:`render_site` writes ``out/index.html`` (every entry listed, no script needed) and
``out/assets/catalogue-data.js`` (``window.CATALOGUE = <catalogue.json>;``).
"""

from __future__ import annotations

import html
import json
from pathlib import Path


def render_site(index: dict, out: Path) -> None:
    """Write a minimal front page for ``index`` (catalogue.json as a dict) under ``out``."""
    out = Path(out)
    (out / "assets").mkdir(parents=True, exist_ok=True)
    data = json.dumps(index, sort_keys=True, separators=(",", ":"), ensure_ascii=True).replace("</", "<\\/")
    (out / "assets" / "catalogue-data.js").write_text(f"window.CATALOGUE = {data};\n", encoding="utf-8")
    rows = "".join(f"<li>{html.escape(e['id'])}: {html.escape(e.get('display_name', ''))}</li>\n"
                   for e in index.get("entries", []))
    (out / "index.html").write_text(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>lemonpack catalogue</title></head>\n"
        f"<body><h1>lemonpack catalogue</h1>\n<ul>\n{rows}</ul>\n</body></html>\n", encoding="utf-8")
