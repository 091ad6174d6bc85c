"""``lemonpack install`` warns when the block it installs is for an accelerator the host
lacks, naming the block and why (section 9's fallback), on stderr and in ``--json``."""

from __future__ import annotations

import json

from support.buildkit import LEMONADE

import pytest

pytestmark = pytest.mark.usefixtures("home")  # a private cache and config for every test

CPU_ONLY = json.dumps({"os": "linux", "accelerators": ["cpu"]})
HOST_ROCM = json.dumps({"os": "linux", "accelerators": ["rocm"], "rocm_arch": "gfx1151"})


def _rocm_only(site, tmp_path):
    recipe = site.pinned(LEMONADE / "llamacpp_per_platform.json", tmp_path / "recipes")
    doc = json.loads(recipe.read_text())
    doc["platforms"] = {"linux": {"rocm": doc["platforms"]["linux"]["rocm"]}}
    recipe.write_text(json.dumps(doc))
    return recipe


def test_install_on_a_host_without_the_blocks_accelerator_warns(lp, site, tmp_path, home, monkeypatch):
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", CPU_ONLY)
    recipe = _rocm_only(site, tmp_path)
    r = lp("install", recipe, "--yes", "--mirror", site.base)
    assert r.code == 0, r
    assert ("warning: using block platforms.linux.rocm although this host has no rocm (host accelerators: cpu): "
            "no block of the recipe (rocm) is for an accelerator this host has") in r.err
    assert "warning" not in r.out
    r = lp("install", recipe, "--yes", "--mirror", site.base, "--json")
    assert r.code == 0, r
    doc = json.loads(r.out)  # stdout is the one JSON document; the warning is a field of it
    assert doc["warnings"] == ["using block platforms.linux.rocm although this host has no rocm "
                               "(host accelerators: cpu): no block of the recipe (rocm) is for an "
                               "accelerator this host has"]


def test_install_of_a_requested_block_the_host_lacks_says_it_was_requested(lp, site, tmp_path, home,
                                                                            monkeypatch):
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", CPU_ONLY)
    recipe = site.pinned(LEMONADE / "llamacpp_per_platform.json", tmp_path / "recipes")
    r = lp("install", recipe, "--yes", "--mirror", site.base, "--accelerator", "cuda", "--json")
    assert r.code == 0, r
    (w,) = json.loads(r.out)["warnings"]
    assert w.startswith("using block platforms.linux.cuda although this host has no cuda")
    assert w.endswith("it was requested (--accelerator cuda)")


def test_install_on_a_host_with_the_accelerator_does_not_warn(lp, site, tmp_path, home, monkeypatch):
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", HOST_ROCM)
    r = lp("install", _rocm_only(site, tmp_path), "--yes", "--mirror", site.base, "--json")
    assert r.code == 0, r
    assert json.loads(r.out)["warnings"] == [] and "warning" not in r.err
