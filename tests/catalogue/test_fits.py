"""Whether a catalogue entry fits a host (lemonpack/catalogue/fits.py), with the reason shown on
the site and by ``catalogue search --fits-host``."""

from __future__ import annotations

import json
from pathlib import Path

from lemonpack.catalogue.fits import fits_host
from lemonpack.contract.host import HostFacts

FIXTURE = Path(__file__).parent / "fixture-catalogue.json"


def test_fits_reasons():
    index = json.loads(FIXTURE.read_text())
    strix = next(e for e in index["entries"] if e["id"] == "recipe:acme-strix-toolbox")
    ok, why = fits_host(strix, HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx1100"))
    assert not ok and "gfx1150" in why and "gfx1100" in why
    ok, why = fits_host(strix, HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx1152"))
    assert ok and why == "linux/rocm gfx1152"
    ok, why = fits_host(strix, HostFacts("darwin", frozenset({"cpu", "metal"})))
    assert not ok and "no platform for darwin" in why
    metal = next(e for e in index["entries"] if e["id"] == "recipe:beta-metal-embed")
    ok, why = fits_host(metal, HostFacts("darwin", frozenset({"cpu"})))
    assert not ok and "needs metal" in why
