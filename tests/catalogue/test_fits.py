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


def _entry(*platforms: dict, install: str = "lemonpack install acme.json") -> dict:
    return {"id": "recipe:acme", "name": "acme", "platforms": list(platforms), "commands": {"install": install}}


ROCM_TUNED = {"os": "linux", "accelerator": "rocm", "archs": ["gfx1151"], "arch_patterns": ["gfx1151"], "any_arch": True}
ROCM_ONLY = {"os": "linux", "accelerator": "rocm", "archs": ["gfx1151"], "arch_patterns": ["gfx1151"], "any_arch": False}
CPU = {"os": "linux", "accelerator": "cpu", "archs": [], "arch_patterns": [], "any_arch": True}
CUDA = {"os": "linux", "accelerator": "cuda", "archs": [], "arch_patterns": [], "any_arch": True}


def test_a_generic_build_with_a_tuned_override_fits_every_arch_as_install_selects():
    """Case 76: install picks the generic block on gfx1100, the override on gfx1151."""
    from lemonpack.catalogue.fits import host_fit

    e = _entry(ROCM_TUNED)
    other = host_fit(e, HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx1100"))
    assert (other.fits, other.reason, other.install_args) == (True, "linux/rocm", ())
    tuned = host_fit(e, HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx1151"))
    assert (tuned.fits, tuned.reason, tuned.install_args) == (True, "linux/rocm gfx1151", ("--arch", "gfx1151"))
    only = host_fit(_entry(ROCM_ONLY), HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx1100"))
    assert not only.fits and only.reason == "linux/rocm is built for gfx1151; the host's GPU is gfx1100"


def test_several_blocks_for_the_os_name_the_accelerator_install_needs():
    """Case 77: cpu + cuda; the command names the block run would launch on each host."""
    from lemonpack.catalogue.fits import host_fit, install_command, platform_installs

    e = _entry(CPU, CUDA)
    cuda = host_fit(e, HostFacts("linux", frozenset({"cpu", "cuda"}), cuda_arch="sm_89"))
    assert cuda.fits and cuda.platform == ("linux", "cuda")
    assert install_command(e, cuda) == "lemonpack install acme.json --accelerator cuda"
    cpu = host_fit(e, HostFacts("linux", frozenset({"cpu"})))
    assert install_command(e, cpu) == "lemonpack install acme.json --accelerator cpu"
    assert platform_installs(e) == {"linux/cpu": "lemonpack install acme.json --accelerator cpu",
                                    "linux/cuda": "lemonpack install acme.json --accelerator cuda"}
    # one block: nothing to name; the shipped example's command is never changed
    assert install_command(_entry(CPU), host_fit(_entry(CPU), HostFacts("linux", frozenset({"cpu"})))) == \
        "lemonpack install acme.json"
    ex = _entry(CPU, CUDA, install="lemonpack install --example")
    assert install_command(ex, host_fit(ex, HostFacts("linux", frozenset({"cpu"})))) == "lemonpack install --example"


def test_any_arch_of_a_built_recipe_is_what_install_decides():
    """facts.runs_on_any_arch asks plan_install: a base artifact (the block's or the recipe's)
    runs on any arch; artifacts per arch only do not; a passthrough recipe always does."""
    from lemonpack.catalogue.facts import recipe_platforms
    from lemonpack.contract.loader import build_model

    def recipe(doc):
        base = {"recipe": "r", "display_name": "r", "api_contract_version": "1", "capabilities": ["chat_completion"]}
        return build_model({**base, **doc}, "r.json")

    art = {"source": "https://example.invalid/a.tar.gz", "sha256": "sha256:" + "a" * 64}
    tuned = {"binary": "llama-server", **art, "arch": {"gfx1151": dict(art)}}
    only = {"binary": "llama-server", "arch": {"gfx1151": dict(art)}}
    got = recipe_platforms(recipe({"variant_of": "llamacpp", "platforms": {"linux": {"rocm": tuned, "vulkan": only}}}))
    assert {p["accelerator"]: p["any_arch"] for p in got} == {"rocm": True, "vulkan": False}
    inherited = recipe({"variant_of": "llamacpp", **art, "platforms": {"linux": {"rocm": only}}})
    assert recipe_platforms(inherited)[0]["any_arch"] is True  # the top-level artifact is the base
    passthrough = recipe({"platforms": {"linux": {"rocm": {"command": "x", "arch": {"gfx1151": {"args": ["-a"]}}}}}})
    assert recipe_platforms(passthrough)[0]["any_arch"] is True
