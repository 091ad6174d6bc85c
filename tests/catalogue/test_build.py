"""lemonpack catalogue build / verify / update / show, end to end through the CLI (real
processes, a real HTTP server on 127.0.0.1 as the mirror, a real file:// git repository)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.catalogue import CatalogueWorld, by_id, fingerprint, run

pytestmark = pytest.mark.timeout(300)


def build(world: CatalogueWorld, out: Path, *extra: str) -> dict:
    r = run(world, "catalogue", "build", "--out", str(out), "--source", str(world.source),
            "--mirror", world.mirror, "--key", str(world.index_key), *extra)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "catalogue.json").read_bytes())


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = CatalogueWorld(tmp_path_factory.mktemp("catalogue"))
    yield w
    w.stop()


@pytest.fixture(scope="module")
def built(world):
    out = world.tmp / "out"
    return out, build(world, out)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_outputs_and_order(built):
    out, index = built
    assert index["schema"] == 1 and index["generated"] == "2023-11-14T22:13:20Z"
    ids = [e["id"] for e in index["entries"]]
    official = [e["id"] for e in index["entries"] if e["official"]]
    assert ids[: len(official)] == sorted(official)
    assert ids[len(official):] == sorted(ids[len(official):])
    assert "recipe:hello-engine" in official and "extension:qwen" in official and len(official) == 9
    assert set(ids) - set(official) == {"recipe:acme-strix", "recipe:beta-box", "extension:acme_moe",
                                        "extension:beta_ext"}
    for e in index["entries"]:
        f = out / "entries" / f"{e['id'].replace(':', '.', 1)}.json"
        assert json.loads(f.read_bytes()) == e
    assert (out / "catalogue.json.sig").is_file() and (out / "index.html").is_file()
    assert (out / "assets" / "catalogue-data.js").read_text().startswith("window.CATALOGUE = ")
    from lemonpack.catalogue.index import search_file_for

    # the compact search index, derived from the very bytes of catalogue.json
    assert (out / "catalogue-search.json").read_bytes() == search_file_for((out / "catalogue.json").read_bytes())
    # the feed parses as Atom and lists every entry once, in index order
    import xml.etree.ElementTree as ET

    feed = ET.fromstring((out / "feed.atom").read_bytes())
    ns = {"a": "http://www.w3.org/2005/Atom"}
    titles = [t.text for t in feed.findall("a:entry/a:title", ns)]
    assert [t.split()[0] for t in titles[: len(ids)]] == ids


def test_each_reject_kind_listed_with_reason(world, built):
    _out, index = built
    rejected = {r["file"]: r for r in index["rejected"]}
    assert set(world.expected_rejects) <= set(rejected)
    for file, kind in world.expected_rejects.items():
        reasons = " ".join(rejected[file]["reasons"])
        assert kind in reasons, (file, reasons)
    assert "colour" in " ".join(rejected["catalogue/entries/acme/broken.toml"]["reasons"])
    mismatch = " ".join(rejected["catalogue/entries/acme/acme-tampered.toml"]["reasons"])
    assert "expected sha256:" in mismatch and "got sha256:" in mismatch
    assert "{model_path}" in " ".join(rejected["catalogue/entries/beta-labs/beta-badtoken.toml"]["reasons"])
    assert "qwen27-q4" in " ".join(rejected["catalogue/entries/acme/acme_clash.toml"]["reasons"])
    # no rejected id appears among the entries: never listed and never dropped silently
    assert not ({(r["id"], r["publisher"]) for r in index["rejected"]}
                & {(e["id"], e["publisher"]) for e in index["entries"]})
    assert by_id(index)["recipe:hello-engine"]["publisher"] == "lemonpack"


def test_signature_statuses(world, built):
    _out, index = built
    e = by_id(index)
    assert e["recipe:acme-strix"]["signature"] == {"status": "verified", "fingerprint": fingerprint(world.keys["acme"])}
    assert e["extension:acme_moe"]["signature"] == {"status": "unknown-key",
                                                    "fingerprint": fingerprint(world.keys["stranger"])}
    assert e["recipe:beta-box"]["signature"] == {"status": "unsigned", "fingerprint": None}
    assert e["recipe:hello-engine"]["signature"] == {"status": "verified",
                                                     "fingerprint": fingerprint(world.keys["index"])}


def test_facts_platforms_pinning_commands(built):
    _out, index = built
    e = by_id(index)
    strix = e["recipe:acme-strix"]
    rocm = next(p for p in strix["platforms"] if p["accelerator"] == "rocm")
    assert rocm["arch_patterns"] == ["gfx115*"] and rocm["archs"] == ["gfx1150", "gfx1151", "gfx1152", "gfx1153"]
    # the block inherits the top-level artifact: install finds one for any arch (plan_install), so does the index
    assert rocm["any_arch"] is True
    assert strix["pinning"]["status"] == "all" and len(strix["pinning"]["artifacts"]) == 2
    box = e["recipe:beta-box"]["pinning"]
    assert box["status"] == "partly"
    assert {i["ref"]: i["pinned"] for i in box["images"]} == {
        "docker.io/beta/whisper@sha256:" + "ab" * 32: True, "docker.io/beta/whisper-cuda:1.0": False}
    cuda = next(p for p in e["recipe:beta-box"]["platforms"] if p["accelerator"] == "cuda")
    assert cuda["archs"] == ["sm_90"]
    hello = e["recipe:hello-engine"]
    assert hello["pinning"]["artifacts"] == [{"url": "https://example.invalid/lemonpack/hello-engine-linux-cpu.tar.gz",
                                              "sha256": "sha256:45cecf7f16009f32175c88870a4680302f2eeeb65b148d2abf8030926dcb060d"}]
    assert hello["commands"]["install"] == "lemonpack install --example"  # the shipped example (case 29)
    assert hello["commands"]["nix"] == "nix build .#hello-engine-linux-cpu"
    assert e["extension:acme_moe"]["platforms"] == [
        {"os": o, "accelerator": "vulkan", "archs": [], "arch_patterns": [], "any_arch": True}
        for o in ("darwin", "linux", "windows")]
    assert e["extension:beta_ext"]["source"]["type"] == "https"
    assert all(x["reproducible"]["status"] == "not-checked" for x in index["entries"])


def test_build_twice_identical_bytes(world, built):
    out, _ = built
    again = world.tmp / "out-again"
    build(world, again)
    assert tree_bytes(out) == tree_bytes(again)


def test_rebuild_reproduces_official_recipe(world):
    """--rebuild runs the real builder; with a published digest equal to ours it reports reproduced."""
    # serve the shipped example artifact on the mirror
    from lemonpack.examples import __file__ as ex

    src = Path(ex).parent / "mirror" / "example.invalid" / "lemonpack" / "hello-engine-linux-cpu.tar.gz"
    world.put("https://example.invalid/lemonpack/hello-engine-linux-cpu.tar.gz", src.read_bytes())
    out = world.tmp / "out-rebuild"
    index = build(world, out, "--rebuild")
    hello = by_id(index)["recipe:hello-engine"]["reproducible"]
    assert hello["status"] == "not-checked" and hello["rebuilt"].startswith("sha256:")
    # publish that digest for a community copy: reproduced; a different one: differs
    w2 = CatalogueWorld(world.tmp / "w2", community=False)
    try:
        w2.put("https://example.invalid/lemonpack/hello-engine-linux-cpu.tar.gz", src.read_bytes())
        w2.publisher("acme", w2.keys["acme"])
        doc = json.loads((Path(ex).parent / "hello-engine.json").read_text())
        for name, good in (("acme-hello", True), ("acme-hello2", False)):
            d = dict(doc, recipe=name)
            # the published digest is what `lemonpack build` of the same recipe gives
            tmpf = w2.tmp / f"{name}.json"
            tmpf.write_text(json.dumps(d, indent=2))
            r = run(w2, "build", str(tmpf), "--out", str(w2.tmp / f"ref-{name}"), "--mirror", w2.mirror, "--json")
            assert r.returncode == 0, r.stderr
            published = json.loads(r.stdout)["indexes"][name]
            if not good:
                published = "sha256:" + "0" * 64
            w2.https_recipe("acme", d, extra=f'published_digest = "{published}"')
        index = build(w2, w2.tmp / "out")
        e = by_id(index)
        assert e["recipe:acme-hello"]["reproducible"]["status"] == "reproduced"
        assert e["recipe:acme-hello2"]["reproducible"]["status"] == "differs"
        assert e["recipe:acme-hello2"]["reproducible"]["published"] == "sha256:" + "0" * 64
    finally:
        w2.stop()


def test_verify_ok_then_modified_index_fails(world, built):
    out, _ = built
    r = run(world, "catalogue", "verify", str(out), "--key", str(world.index_pub))
    assert r.returncode == 0, r.stdout + r.stderr
    copy = world.tmp / "tampered"
    import shutil

    shutil.copytree(out, copy)
    data = (copy / "catalogue.json").read_bytes().replace(b'"status":"unsigned"', b'"status":"verified"', 1)
    (copy / "catalogue.json").write_bytes(data)
    r = run(world, "catalogue", "verify", str(copy), "--key", str(world.index_pub))
    assert r.returncode == 3 and "does not verify" in r.stdout
    # an entry file changed (index untouched): also caught
    shutil.rmtree(copy)
    shutil.copytree(out, copy)
    f = copy / "entries" / "recipe.acme-strix.json"
    f.write_bytes(f.read_bytes().replace(b"Acme Strix", b"Acme Strax"))
    r = run(world, "catalogue", "verify", str(copy), "--key", str(world.index_pub))
    assert r.returncode == 3 and "recipe.acme-strix.json: differs" in r.stdout
    # another key: the signature does not verify
    other = world.tmp / "other.pub"
    from support.catalogue import pem

    other.write_text(pem(world.keys["stranger"]))
    r = run(world, "catalogue", "verify", str(out), "--key", str(other))
    assert r.returncode == 3


def test_verify_refetch_detects_changed_source(world, built):
    out, _ = built
    r = run(world, "catalogue", "verify", str(out), "--key", str(world.index_pub), "--fetch", "--mirror", world.mirror,
            env={"LEMONPACK_CACHE_DIR": str(world.tmp / "fresh-cache")})
    assert r.returncode == 0, r.stdout + r.stderr
    url = "https://example.invalid/beta-labs/beta-box.json"
    from lemonpack.fetch import mirror_path

    p = world.mirror_root / mirror_path(url)
    original = p.read_bytes()
    p.write_bytes(original + b"\n")
    try:
        r = run(world, "catalogue", "verify", str(out), "--key", str(world.index_pub), "--fetch", "--mirror",
                world.mirror, env={"LEMONPACK_CACHE_DIR": str(world.tmp / "fresh-cache2")})
        assert r.returncode == 3 and "recipe:beta-box" in r.stdout and "sha256 mismatch" in r.stdout
    finally:
        p.write_bytes(original)


def test_update_verifies_and_keeps_old_copy_on_bad_signature(world, built):
    out, index = built
    cache = world.tmp / "upd-cache"
    env = {"LEMONPACK_CACHE_DIR": str(cache)}
    r = run(world, "catalogue", "update", "--from", str(out), "--key", str(world.index_pub), env=env)
    assert r.returncode == 0, r.stderr
    cached = cache / "catalogue" / "catalogue.json"
    good = cached.read_bytes()
    assert good == (out / "catalogue.json").read_bytes()
    assert (cache / "catalogue" / "catalogue-search.json").read_bytes() == (out / "catalogue-search.json").read_bytes()
    # over HTTP too
    import shutil

    served = world.mirror_root / "idx"
    shutil.copytree(out, served)
    r = run(world, "catalogue", "update", "--from", f"{world.mirror}/idx/", "--key", str(world.index_pub), env=env)
    assert r.returncode == 0, r.stderr
    # a forged index (signature of another key) is refused; the cached copy stays
    forged = world.tmp / "forged"
    shutil.copytree(out, forged)
    (forged / "catalogue.json").write_bytes(good.replace(b"Acme Strix", b"Evil Strix"))
    r = run(world, "catalogue", "update", "--from", str(forged), "--key", str(world.index_pub), env=env)
    assert r.returncode == 3 and "refusing" in r.stderr
    assert cached.read_bytes() == good
    # an unsigned one too
    (forged / "catalogue.json").write_bytes(good)
    (forged / "catalogue.json.sig").unlink()
    r = run(world, "catalogue", "update", "--from", str(forged), "--key", str(world.index_pub), env=env)
    assert r.returncode == 3 and "unsigned" in r.stderr
    # named under the user's --from directory, not the temporary copy it was verified in
    assert f"{forged / 'catalogue.json.sig'}: missing" in r.stderr and ".catalogue.tmp-" not in r.stderr
    assert cached.read_bytes() == good
    # over HTTP: named under the URL given
    shutil.copytree(forged, world.mirror_root / "unsigned")
    r = run(world, "catalogue", "update", "--from", f"{world.mirror}/unsigned/", "--key", str(world.index_pub), env=env)
    assert r.returncode == 3 and f"{world.mirror}/unsigned/catalogue.json.sig: missing" in r.stderr
    assert ".catalogue.tmp-" not in r.stderr
    # search and show read the cached copy
    r = run(world, "catalogue", "search", "acme strix", "--json", env=env)
    assert r.returncode == 0 and [x["id"] for x in json.loads(r.stdout)["results"]] == ["recipe:acme-strix"]
    r = run(world, "catalogue", "show", "acme-strix", env=env)
    assert r.returncode == 0 and "gfx1151" in r.stdout and "lemonpack install acme-strix.json" in r.stdout
    assert fingerprint(world.keys["acme"]) in r.stdout
    r = run(world, "catalogue", "show", "recipe:acme-forged", env=env)
    assert r.returncode == 1 and "rejected" in r.stderr and "invalid signature" in r.stderr


def test_bad_output_leaves_previous(world, built, tmp_path):
    """A build that cannot finish (a wrong key password) leaves the previous output as it was."""
    out, _ = built
    before = tree_bytes(out)
    r = run(world, "catalogue", "build", "--out", str(out), "--source", str(world.source), "--mirror", world.mirror,
            "--key", str(world.index_key), env={"LEMONPACK_PASSWORD": "wrong"})
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert tree_bytes(out) == before
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".out.tmp-")]


def test_warm_build_from_the_memo_is_the_same_as_a_fresh_one(world, built):
    """The memo of a build (entries verified, files checked, fragments rendered) gives the
    same bytes as --fresh; an entry file that changed is described anew."""
    out, _ = built
    memo = world.tmp / "cache" / "catalogue-build" / "memo.json"
    assert memo.is_file()
    warm, fresh = world.tmp / "out-warm", world.tmp / "out-fresh"
    build(world, warm)
    build(world, fresh, "--fresh")
    assert tree_bytes(warm) == tree_bytes(out) == tree_bytes(fresh)
    entry = world.source / "catalogue" / "entries" / "beta-labs" / "beta-box.toml"
    text = entry.read_text()
    try:
        entry.write_text(text.replace("A **community** recipe", "A **changed** recipe"))
        changed = by_id(build(world, world.tmp / "out-changed"))["recipe:beta-box"]
        assert changed["description"].startswith("A **changed** recipe")
        page = (world.tmp / "out-changed" / "entry" / "recipe-beta-box.html").read_text()
        assert "<strong>changed</strong>" in page
    finally:
        entry.write_text(text)


def test_a_warm_build_into_its_own_output_links_what_is_unchanged_and_rewrites_what_was_touched(world, tmp_path):
    """A warm build into the directory it built before takes the unchanged files from there
    (hard links: same inodes, nothing rewritten) and gives the bytes and mtimes of --fresh; a
    file edited in the old output in place, or replaced by a symlink, is written again."""
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    build(world, out)
    build(world, fresh, "--fresh")
    want = tree_bytes(fresh)
    page = out / "entry" / "recipe-beta-box.html"
    inodes = {rel: (out / rel).stat().st_ino for rel in want}
    build(world, out)
    assert tree_bytes(out) == want
    linked = [rel for rel in want if (out / rel).stat().st_ino == inodes[rel]]
    assert page.relative_to(out).as_posix() in linked and "catalogue.json" in linked
    assert len(linked) == len(want), sorted(set(want) - set(linked))
    assert {(out / rel).stat().st_mtime for rel in want} == {(fresh / rel).stat().st_mtime for rel in want}
    page.write_text(page.read_text().replace("beta-box", "tampered"))  # in place: the same inode
    entry_json = out / "entries" / "recipe.beta-box.json"
    entry_json.unlink()
    entry_json.symlink_to(fresh / "entries" / "recipe.beta-box.json")
    build(world, out)
    assert tree_bytes(out) == want
    assert not entry_json.is_symlink()


def test_update_over_http_goes_through_fetch(world, built):
    """``catalogue update`` from a URL uses the one download path: a redirected index is
    followed hop by hop, and a body that is not an index (an HTML error page behind a 200)
    is a one-line error naming the URL, with the cached copy untouched, never a traceback."""
    import shutil

    out, _ = built
    env = {"LEMONPACK_CACHE_DIR": str(world.tmp / "upd-http-cache")}
    served = world.mirror_root / "idx-http"
    shutil.copytree(out, served)
    for p in sorted(served.rglob("*")):
        if p.is_file():
            rel = p.relative_to(served).as_posix()
            world.server.httpd.redirects[f"/moved/{rel}"] = f"/idx-http/{rel}"
    r = run(world, "catalogue", "update", "--from", f"{world.mirror}/moved/", "--key", str(world.index_pub), env=env)
    assert r.returncode == 0, r.stderr
    cached = world.tmp / "upd-http-cache" / "catalogue" / "catalogue.json"
    assert cached.read_bytes() == (out / "catalogue.json").read_bytes()
    page = world.mirror_root / "html"
    page.mkdir()
    (page / "catalogue.json").write_text("<html>maintenance</html>")
    r = run(world, "catalogue", "update", "--from", f"{world.mirror}/html/", "--key", str(world.index_pub), env=env)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert f"{world.mirror}/html/catalogue.json: not a catalogue index" in r.stderr
    assert cached.read_bytes() == (out / "catalogue.json").read_bytes()


def test_a_rebuild_into_the_same_directory_keeps_each_entrys_history(world, tmp_path):
    index = build(world, tmp_path / "o")
    again = build(world, tmp_path / "o")  # the same sources, the same directory: no new versions
    assert [e.get("history") for e in again["entries"]] == [e.get("history") for e in index["entries"]]
    assert all(len(e["history"]) == 1 and e["history"][0]["digest"] == e["digest"] for e in again["entries"])

