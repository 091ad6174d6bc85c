"""The per-CPU artifacts key (lemonpack/contract/cpuartifacts.py): validated strictly when a
recipe is loaded (so by lint), merged onto the effective block for a CPU."""

from __future__ import annotations

import pytest

from lemonpack.contract import load_recipe, targets
from lemonpack.contract.cpuartifacts import KEY, cpu_unfit, for_cpu, offered_cpus
from lemonpack.errors import ManifestError, SelectionError
from support.recipes import recipe_doc, write_recipe

SHA_A, SHA_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def _recipe(tmp_path, table, **fields):
    doc = recipe_doc("per-cpu", capabilities=["chat_completion"], variant_of="llamacpp", binary="srv",
                     block={"source": "https://h/x86.tgz", "sha256": SHA_A,
                            "arch": {"gfx1151": {"source": "https://h/gfx.tgz", "sha256": SHA_A}}},
                     accelerator="rocm", extensions={KEY: table}, **fields)
    return write_recipe(tmp_path / "r.json", doc)


def test_merged_like_an_arch_override(tmp_path):
    r = load_recipe(_recipe(tmp_path, {
        "linux/rocm": {"amd64": {"source": "https://h/x86.tgz", "sha256": SHA_A},
                       "arm64": {"source": "https://h/arm.tgz", "sha256": SHA_B}},
        "linux/rocm/gfx1151": {"arm64": {"source": "https://h/gfx-arm.tgz", "sha256": SHA_B}}}))
    base, gfx = targets(r)
    assert offered_cpus(r, "linux", "rocm") == ("amd64", "arm64")
    assert offered_cpus(r, "linux", "rocm", "gfx1151") == ("arm64",)  # the most specific entry
    arm = for_cpu(base, "arm64")
    assert (arm.provenance.source, arm.provenance.sha256) == ("https://h/arm.tgz", "b" * 64)
    assert arm.source_path == f'extensions["{KEY}"]["linux/rocm"].arm64.source'
    assert for_cpu(gfx, "arm64").provenance.source == "https://h/gfx-arm.tgz"
    with pytest.raises(SelectionError, match=r'\["linux/rocm/gfx1151"\] offers platforms.linux.rocm.arch.gfx1151 '
                                             r"for arm64, not for amd64"):
        for_cpu(gfx, "amd64")


def test_a_recipe_without_the_key_is_unchanged(tmp_path):
    r = load_recipe(write_recipe(tmp_path / "r.json", recipe_doc(
        "plain", variant_of="llamacpp", binary="srv", block={"source": "https://h/a.tgz", "sha256": SHA_A})))
    (t,) = targets(r)
    assert for_cpu(t, "s390x") is t and offered_cpus(r, "linux", "cpu") == ()


@pytest.mark.parametrize("table, path, words", [
    ({"linux/cuda": {"amd64": {"source": "https://h/a", "sha256": SHA_A}}}, f'extensions["{KEY}"]["linux/cuda"]',
     "names no platform block"),
    ({"linux/rocm/gfx90a": {"amd64": {"source": "https://h/a", "sha256": SHA_A}}},
     f'extensions["{KEY}"]["linux/rocm/gfx90a"]', "has no arch override 'gfx90a'"),
    ({"linux/rocm": {"x86_64": {"source": "https://h/a", "sha256": SHA_A}}},
     f'extensions["{KEY}"]["linux/rocm"].x86_64', "'x86_64' is no OCI architecture"),
    ({"linux/rocm": {"amd64": {"source": "https://h/a", "sha256": SHA_A, "size": 3}}},
     f'extensions["{KEY}"]["linux/rocm"].amd64.size', "unknown field"),
    ({"linux/rocm": {"amd64": {"source": "ftp://h/a", "sha256": SHA_A}}},
     f'extensions["{KEY}"]["linux/rocm"].amd64.source', "must be an http(s) URL"),
    ({"linux/rocm": {"amd64": {"source": "https://h/a", "sha256": "a" * 64}}},
     f'extensions["{KEY}"]["linux/rocm"].amd64.sha256', "must be sha256:<64 hex digits>"),
    ({"linux/rocm": {}}, f'extensions["{KEY}"]["linux/rocm"]', "must map CPU architectures"),
    ([], f'extensions["{KEY}"]', "must be an object of blocks"),
])
def test_lint_is_strict(tmp_path, table, path, words):
    with pytest.raises(ManifestError) as e:
        load_recipe(_recipe(tmp_path, table))
    found = [p for p in e.value.problems if p.rule == "cpu-artifacts"]
    assert found and found[0].path == path and words in found[0].message, e.value.problems


def test_only_variant_of_recipes(tmp_path):
    doc = recipe_doc("pass", extensions={KEY: {"linux/cpu": {"amd64": {"source": "https://h/a", "sha256": SHA_A}}}})
    with pytest.raises(ManifestError) as e:
        load_recipe(write_recipe(tmp_path / "p.json", doc))
    assert any("only a variant_of recipe" in p.message for p in e.value.problems)


def test_catalogue_fit_words():
    assert cpu_unfit(["amd64", "arm64"], "arm64") is None
    assert cpu_unfit(None, "s390x") is None
    assert cpu_unfit(["amd64"], "arm64") == "its artifacts are for amd64; the host's CPU is arm64"


def test_catalogue_fit_reads_the_offered_cpus(tmp_path):
    """The index records ``cpu_archs`` for a block with per-CPU artifacts
    (catalogue/facts.py), and "runs on this host" (catalogue/fits.py) holds the host's CPU to them."""
    from lemonpack.catalogue.facts import recipe_platforms
    from lemonpack.catalogue.fits import fits_host
    from lemonpack.contract.host import HostFacts

    r = load_recipe(_recipe(tmp_path, {"linux/rocm": {"amd64": {"source": "https://h/x86.tgz", "sha256": SHA_A},
                                                      "arm64": {"source": "https://h/arm.tgz", "sha256": SHA_B}}}))
    (plat,) = recipe_platforms(r)
    assert plat["cpu_archs"] == ["amd64", "arm64"]
    entry = {"id": "recipe.per-cpu", "name": "per-cpu", "platforms": [plat]}
    host = HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx1151", cpu_arch="arm64")
    assert fits_host(entry, host) == (True, "linux/rocm gfx1151")
    s390 = HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx1151", cpu_arch="s390x")
    assert fits_host(entry, s390) == (False, "linux/rocm: its artifacts are for amd64, arm64; the host's CPU is s390x")
    plain = load_recipe(write_recipe(tmp_path / "p.json", recipe_doc(
        "plain", variant_of="llamacpp", binary="srv", block={"source": "https://h/a.tgz", "sha256": SHA_A})))
    assert "cpu_archs" not in recipe_platforms(plain)[0]  # the index of a recipe without the key is unchanged
