"""Model entries of the catalogue (lemonpack/catalogue/models.py, issue 28 point 6): a ModelPack
artifact pushed to the real local registry (Debian's docker-registry, tests/support/registry.py)
by lemonpack's own push, a catalogue built from a source naming it by digest (the real CLI in a
child process), its facts, memory estimate, the recipes whose selector accepts it, fit against an
injected memory budget, search by kind, ``show``'s commands and the entry page."""

from __future__ import annotations

import copy
import json
import pytest

from lemonpack.catalogue.models import link_recipes, model_commands, model_fit
from lemonpack.catalogue.sources import check_entry
from lemonpack.runtime.models.memory import estimate_model
from lemonpack.runtime.models.push import push_model
from lemonpack.signing.remote import sign_image
from support.catalogue import STRIX, S_CPU, S_ROCM, CatalogueWorld, by_id, fingerprint, run
from support.gguf_files import write_gguf

DIGEST = "sha256:" + "ab" * 32


def model_entry(need: int) -> dict:
    return {"id": "model:m", "kind": "model", "name": "m", "source": {"type": "oci", "ref": f"h:5000/m@{DIGEST}"},
            "model": {"main": "m.gguf", "memory": {"bytes": need}, "recipes": []}}


@pytest.mark.parametrize("need, budget, fits, words", [
    (3 << 20, 4 << 20, True, "needs 3.0 MiB of this host's 4.0 MiB memory budget"),
    (4 << 20, 4 << 20, True, "of this host's"),
    ((4 << 20) + 1, 4 << 20, False, "more than this host's 4.0 MiB memory budget"),
    (3 << 20, None, True, "memory budget is unknown"),
])
def test_fit_is_the_estimate_against_the_memory_budget(need, budget, fits, words):
    got = model_fit(model_entry(need), budget)
    assert got.fits is fits and words in got.reason


def test_an_entry_without_an_estimate_does_not_fit():
    e = model_entry(1)
    del e["model"]["memory"]
    assert model_fit(e, 1 << 40).fits is False


def test_recipes_are_those_whose_serves_patterns_accept_the_main_file():
    entries = [model_entry(1),
               {"id": "recipe:gguf", "name": "gguf", "kind": "recipe", "serves": ["*.GGUF"]},
               {"id": "recipe:onnx", "name": "onnx", "kind": "recipe", "serves": ["*.onnx"]},
               {"id": "recipe:none", "name": "none", "kind": "recipe"},
               {"id": "extension:x", "kind": "extension", "serves": ["*.gguf"]}]
    link_recipes(entries)
    assert entries[0]["model"]["recipes"] == ["recipe:gguf"]
    assert entries[0]["commands"]["install"] == f"lemonpack models add user.m --recipe gguf -c main=oci://h:5000/m@{DIGEST}"


def test_derived_tags_are_tag_shaped():
    from lemonpack.catalogue.models import model_tags

    assert model_tags(["x", "gguf"], {"architecture": "Llama", "quantization": "Q4_K_M", "model_format": "gguf"}) \
        == ["x", "gguf", "llama", "q4_k_m"]
    assert model_tags([], {"architecture": "<script>", "quantization": None}) == []


def test_commands_are_shell_quoted_and_pinned():
    cmds = model_commands("m", {"type": "oci", "ref": f"oci://h:5000/m@{DIGEST}"})
    assert cmds["fetch"] == f"lemonpack models pull oci://h:5000/m@{DIGEST}"
    assert cmds["install"] == f"lemonpack models add user.m --recipe llamacpp -c main=oci://h:5000/m@{DIGEST}"


@pytest.mark.parametrize("source, ok", [
    (f'type = "oci"\nref = "h:5000/m@{DIGEST}"', True),
    (f'type = "oci"\nref = "oci://h:5000/m@{DIGEST}"', True),
    ('type = "oci"\nref = "h:5000/m:v1"', False),  # a tag is refused
    (f'type = "https"\nurl = "https://example.invalid/m.gguf"\nsha256 = "{DIGEST}"', False),
])
def test_a_model_entry_names_an_artifact_by_digest(tmp_path, source, ok):
    p = tmp_path / "entries" / "acme" / "m.toml"
    p.parent.mkdir(parents=True)
    p.write_text(f'kind = "model"\nname = "m"\nlicense = "MIT"\ndescription = "d"\n[source]\n{source}\n')
    ent, problems = check_entry(p)
    assert (ent is not None) is ok, problems
    if not ok:
        assert problems and all(q.file == str(p) for q in problems)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_build_reads_the_header_not_the_weights(registry, tmp_path):
    """describe_model fetches the manifest, the config and a prefix of the weights (the GGUF
    header) into its own store; the 6 MiB weight blob itself is never fetched."""
    from lemonpack.catalogue.models import describe_model
    from lemonpack.runtime.models.pull import HEADER_FIRST_READ
    from lemonpack.runtime.models.store import ModelStore

    gguf = write_gguf(tmp_path / "big.gguf", "llama", {"llama.context_length": 8192}, {"w": [1024, 1536]})
    assert gguf.stat().st_size > 4 * HEADER_FIRST_READ
    pushed = push_model([gguf], f"{registry.host}/models/big:v1")
    m = describe_model(f"{registry.host}/models/big@{pushed.digest}", tmp_path / "work")
    store = ModelStore(tmp_path / "work" / "models")
    weight = pushed.files[0]
    assert not store.has(weight.digest, weight.size)
    assert store.header_path(weight.digest).stat().st_size == HEADER_FIRST_READ
    assert m["size"] == gguf.stat().st_size and m["context_length"] == 8192
    assert m["memory"]["ctx_size"] == 4096  # the launch default, below the model's context
    assert m["memory"]["bytes"] == estimate_model(str(gguf), ctx_size=4096).total


def serving_recipe(name: str, patterns: list[str]) -> dict:
    doc = copy.deepcopy(STRIX)
    doc["recipe"] = name
    doc["extensions"] = {"dev.lemonpack.serves": patterns}
    return doc


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_pushed_modelpack_is_a_catalogue_entry(registry, tmp_path):
    gguf = write_gguf(tmp_path / "tiny-q.gguf", "llama",
                      {"llama.context_length": 2048, "llama.block_count": 2, "llama.embedding_length": 64,
                       "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
                       "general.file_type": 0, "general.size_label": "17K", "general.name": "tiny"},
                      {"token_embd.weight": [64, 256]})
    pushed = push_model([gguf], f"{registry.host}/models/tiny:v1")
    ref = f"{registry.host}/models/tiny@{pushed.digest}"
    world = CatalogueWorld(tmp_path / "w", community=False)
    try:
        world.publisher("acme", world.keys["acme"])
        sign_image(ref, world.keys["acme"])  # cosign's format, in the registry, as for an OCI recipe
        world.put("https://example.invalid/acme/strix-cpu.tar.gz", S_CPU)
        world.put("https://example.invalid/acme/strix-rocm.tar.gz", S_ROCM)
        world.https_recipe("acme", serving_recipe("acme-gguf", ["*.gguf"]))
        world.https_recipe("acme", serving_recipe("acme-onnx", ["*.onnx"]))
        world.entry("acme", "tiny", f'kind = "model"\nname = "tiny"\nlicense = "MIT"\ndescription = "A tiny llama."\n'
                    f'tags = ["llama"]\n[source]\ntype = "oci"\nref = "oci://{ref}"\n')
        world.entry("acme", "tagged", 'kind = "model"\nname = "tagged"\nlicense = "MIT"\ndescription = "t"\n'
                    f'[source]\ntype = "oci"\nref = "{registry.host}/models/tiny:v1"\n')
        world.entry("acme", "absent", 'kind = "model"\nname = "absent"\nlicense = "MIT"\ndescription = "t"\n'
                    f'[source]\ntype = "oci"\nref = "{registry.host}/models/tiny@{DIGEST}"\n')
        out = tmp_path / "out"
        r = run(world, "catalogue", "build", "--out", str(out), "--source", str(world.source), "--mirror", world.mirror)
        assert r.returncode == 0, r.stderr
        index = json.loads((out / "catalogue.json").read_bytes())
        rejected = {x["id"]: x["reasons"] for x in index["rejected"]}
        assert any("schema" in reason for reason in rejected["entry:acme/tagged"])
        assert any(reason.startswith("model: ") for reason in rejected["model:absent"]), rejected
        e = by_id(index)["model:tiny"]
        m = e["model"]
        assert e["digest"] == pushed.digest and e["source"] == {"type": "oci", "ref": ref}
        assert e["signature"] == {"status": "verified", "fingerprint": fingerprint(world.keys["acme"])}
        assert e["pinning"]["status"] == "all"
        assert m["format"] == "modelpack" and m["model_format"] == "gguf" and m["main"] == "tiny-q.gguf"
        assert m["size"] == gguf.stat().st_size
        assert (m["architecture"], m["parameters"], m["quantization"], m["context_length"]) == \
            ("llama", "17K", "F32", 2048)
        est = estimate_model(str(gguf), ctx_size=2048)  # the model's context is below the 4096 default
        assert m["memory"]["bytes"] == est.total and m["memory"]["kv"] == est.kv > 0
        assert m["memory"]["ctx_size"] == 2048
        assert m["recipes"] == ["recipe:acme-gguf"] and m["default_backend"] == "llamacpp"
        assert by_id(index)["recipe:acme-gguf"]["serves"] == ["*.gguf"]
        assert e["commands"]["fetch"] == f"lemonpack models pull oci://{ref}"
        assert e["commands"]["install"] == f"lemonpack models add user.tiny --recipe acme-gguf -c main=oci://{ref}"
        # only the manifest, config and header were fetched: nothing of the user's store
        assert not (world.tmp / "cache" / "models").exists()

        assert e["tags"] == ["llama", "f32", "gguf"]  # the entry's own, then the model's words
        for args in (["--kind", "model"], ["f32"], ["gguf", "--kind", "model"]):
            found = run(world, "catalogue", "search", *args, "--index", str(out), "--json")
            assert found.returncode == 0, found.stderr
            assert [x["id"] for x in json.loads(found.stdout)["results"]] == ["model:tiny"], args
        need = m["memory"]["bytes"]
        for budget, fits in ((need, True), (need - 1, False)):
            shown = run(world, "catalogue", "show", "model:tiny", "--index", str(out), "--memory-budget", str(budget))
            assert shown.returncode == 0, shown.stderr
            assert ("this host: runs here" if fits else "this host: does not run here") in shown.stdout
            assert "quantization F32" in shown.stdout and "context 2048" in shown.stdout
            assert "recipes: recipe:acme-gguf" in shown.stdout
            assert f"fetch: lemonpack models pull oci://{ref}" in shown.stdout
            assert f"install: lemonpack models add user.tiny --recipe acme-gguf -c main=oci://{ref}" in shown.stdout
            js = json.loads(run(world, "catalogue", "show", "model:tiny", "--index", str(out), "--json",
                                "--memory-budget", str(budget)).stdout)
            assert js["host"]["runs_here"] is fits
        fitting = run(world, "catalogue", "search", "--kind", "model", "--fits-host", "--memory-budget", "1KiB",
                      "--index", str(out), "--json")
        assert json.loads(fitting.stdout)["results"] == []
        bad = run(world, "catalogue", "show", "model:tiny", "--index", str(out), "--memory-budget", "lots")
        assert bad.returncode != 0 and "lots" in bad.stderr and "Traceback" not in bad.stderr

        from lemonpack.catalogue.site import entry_facets

        assert entry_facets(e)["kind"] == ["model"]  # the page's kind facet
        html = "".join(p.read_text() for p in out.rglob("*.html") if "tiny" in p.name)
        assert 'id="model"' in html and 'data-model="quantization">F32' in html
        assert "recipe:acme-gguf" in html
        page_fit(out, e)
    finally:
        world.stop()


def test_model_is_a_kind_search_accepts():
    from lemonpack.catalogue.search import check_filters, rules

    assert "model" in rules()["kinds"]
    assert check_filters({"entries": []}, {"kind": ["model"]}) == {"kind": ["model"]}


def page_fit(out, e: dict) -> None:
    """The site's JavaScript fit of the model entry (page data and index shapes) is the CLI's rule
    with the budget unknown (model_fit(e, None)): a page cannot read the host's memory."""
    from selenium.webdriver.support.ui import WebDriverWait

    from support.browser import chromium

    host = {"os": "linux", "accelerators": ["cpu"], "rocm_arch": None, "cuda_arch": None}
    with chromium(offline=True) as driver:
        driver.get((out / "index.html").as_uri() + "#kind=model")
        WebDriverWait(driver, 10).until(lambda d: d.execute_script("return document.body.getAttribute('data-ready')") == "true")
        shown = driver.execute_script("return Array.from(document.querySelectorAll('#entries > li'))"
                                      ".filter(li => !li.hidden).map(li => li.dataset.id)")
        assert shown == ["model:tiny"]
        sizes = [e["model"]["memory"]["bytes"], 12, 5 << 30, (3 << 20) + 12345]
        entries = [{"kind": "model", "memory": n} for n in sizes] + [e, {"kind": "model"}]
        got = driver.execute_script(
            "const api = window.lemonpackCatalogue, h = api.parseHost(arguments[1]);"
            "return arguments[0].map(x => { const r = api.fit(x, h); return [r.fits, r.reason]; });", entries, host)
    want = [[f.fits, f.reason] for f in (model_fit({"model": {"memory": {"bytes": n}}}, None) for n in sizes)]
    want += [[model_fit(e, None).fits, model_fit(e, None).reason], [False, "no memory estimate recorded"]]
    assert got == want
