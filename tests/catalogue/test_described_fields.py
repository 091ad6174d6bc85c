"""The descriptive fields of a catalogue entry live in one table (``catalogue.sources.DESCRIBED``):
the entry schema, the index and ``catalogue show`` all follow it, so a new field is a row there,
a schema property and (to show it on the site) a template line."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources

from lemonpack.catalogue.sources import DESCRIBED, described


def _shipped() -> dict:
    return json.loads(resources.files("lemonpack.catalogue").joinpath("shipped/catalogue.json").read_bytes())


def test_every_described_field_is_in_the_entry_schema():
    schema = json.loads(resources.files("lemonpack.catalogue").joinpath("schema/entry.schema.json").read_bytes())
    assert set(DESCRIBED) <= set(schema["properties"])


def test_described_takes_defaults_and_stringifies():
    assert described({}) == DESCRIBED
    assert described({"license": "Apache-2.0", "homepage": "https://x.example", "other": 1}) == \
        {**DESCRIBED, "license": "Apache-2.0", "homepage": "https://x.example"}


def test_index_entries_and_show_carry_every_described_field():
    entries = _shipped()["entries"]
    assert entries and all(set(DESCRIBED) <= set(e) for e in entries)
    r = subprocess.run([sys.executable, "-c", "from lemonpack.cli import main; main()", "catalogue", "show",
                        "recipe:hello-engine"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("version: "))
    assert [part.split(":")[0] for part in line.split("   ")] == ["version", *DESCRIBED]
