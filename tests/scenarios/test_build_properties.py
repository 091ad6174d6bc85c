"""Build properties: byte-reproducibility, nothing left behind on failure, warm cache
without network, and ``lemonpack install``."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time

import pytest

from support.buildkit import LEMONADE, blob_json, tags, tar_gz, tree_files
from support.recipes import recipe_doc, write_recipe

pytestmark = pytest.mark.usefixtures("home")  # a private cache and config for every test

ARCH = LEMONADE / "llamacpp_arch_overrides.json"
RID = "llamacpp-arch-overrides"


def _blobs(out):
    return {p.name for p in (out / "blobs" / "sha256").iterdir()}


def test_byte_reproducible_across_caches_dirs_and_time(lp, site, tmp_path, monkeypatch):
    recipe = site.pinned(ARCH, tmp_path / "recipes")
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache-a"))
    a = lp("build", recipe, "--out", tmp_path / "a" / "out", "--mirror", site.base, "--json")
    assert a.code == 0, a
    # a different time, a different cache, different file mtimes in the served tree
    time.sleep(1.1)
    for p in site.root.rglob("*"):
        os.utime(p, (1_000_000_000, 1_000_000_000))
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache-b"))
    b = lp("build", recipe, "--out", tmp_path / "b" / "layout", "--mirror", site.base, "--json")
    assert b.code == 0, b
    assert a.json()["indexes"] == b.json()["indexes"]
    A, B = tmp_path / "a" / "out", tmp_path / "b" / "layout"
    assert (A / "index.json").read_bytes() == (B / "index.json").read_bytes()
    assert _blobs(A) == _blobs(B)
    assert tree_files(A) == tree_files(B)
    for rel in tree_files(A):
        assert (A / rel).read_bytes() == (B / rel).read_bytes(), rel

    # SOURCE_DATE_EPOCH changes the digest, and shows in the config's "created"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    c = lp("build", recipe, "--out", tmp_path / "c", "--mirror", site.base, "--json")
    assert c.code == 0, c
    assert c.json()["indexes"][RID] != a.json()["indexes"][RID]
    for layout, created in ((A, "1970-01-01T00:00:00Z"), (tmp_path / "c", "2023-11-14T22:13:20Z")):
        m = blob_json(layout, tags(layout)[f"{RID}.linux-rocm-gfx1151"]["digest"])
        assert blob_json(layout, m["config"]["digest"])["created"] == created


def test_same_bytes_with_one_deflate_worker_or_two(lp, site, tmp_path, monkeypatch):
    """The layer's gzip stream is cut at fixed tar offsets, whatever the number of threads
    that deflate it (one per CPU the process may run on): a build pinned to one CPU and a
    build on two give the same index digest and the same blobs, and GNU gzip reads the
    layer back to the artifact's files."""
    import hashlib
    import random
    import shutil
    import subprocess

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    rnd = random.Random(25)
    text = b"".join(b"%06d tensor rope kv-cache %d\n" % (i, i * 7 % 1000) for i in range(120_000))
    data = tar_gz([("llama-server", b"#!/bin/sh\necho big\n", 0o755), ("lib/blob.bin", rnd.randbytes(3 << 20), 0o644),
                   ("lib/log.txt", text, 0o644)])
    url = "https://example.invalid/bt/big.tar.gz"
    sha = site.put(url, data)
    recipe = write_recipe(tmp_path / "big.json", recipe_doc(
        "big-recipe", display_name="b", variant_of="llamacpp", version_policy="pinned", binary="llama-server",
        block={"source": url, "sha256": "sha256:" + sha}))
    cpus = os.sched_getaffinity(0)
    outs = {}
    for n in (1, 2):
        monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / f"cache-{n}"))  # a cold build each
        os.sched_setaffinity(0, set(sorted(cpus)[:n]))  # the deflate pool has one thread per CPU
        try:
            res = lp("build", recipe, "--out", tmp_path / f"out-{n}", "--mirror", site.base, "--json")
        finally:
            os.sched_setaffinity(0, cpus)
        assert res.code == 0, res
        outs[n] = res.json()["indexes"]
    assert outs[1] == outs[2]
    assert _blobs(tmp_path / "out-1") == _blobs(tmp_path / "out-2")
    m = blob_json(tmp_path / "out-1", tags(tmp_path / "out-1")["big-recipe.linux-cpu"]["digest"])
    layer = tmp_path / "out-1" / "blobs" / "sha256" / m["layers"][0]["digest"][7:]
    assert layer.stat().st_size > 3 << 20  # several deflate blocks
    if shutil.which("gzip"):
        tar = subprocess.run(["gzip", "-dc", str(layer)], check=True, capture_output=True).stdout
        diff_id = blob_json(tmp_path / "out-1", m["config"]["digest"])["rootfs"]["diff_ids"][0]
        assert "sha256:" + hashlib.sha256(tar).hexdigest() == diff_id
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            assert tf.extractfile("opt/lemonpack/big-recipe/lib/log.txt").read() == text


def test_bad_source_date_epoch_is_refused(lp, site, tmp_path, monkeypatch):
    recipe = site.pinned(ARCH, tmp_path / "recipes")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    r = lp("build", recipe, "--out", tmp_path / "out", "--mirror", site.base)
    assert r.code != 0 and "SOURCE_DATE_EPOCH" in r.text and not (tmp_path / "out").exists(), r


# ---------------------------------------------------------------- unsafe archives

def _evil_tar(kind: str) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tf:
        good = b"#!/bin/sh\necho ok\n"
        ti = tarfile.TarInfo("llama-server")
        ti.size, ti.mode = len(good), 0o755
        tf.addfile(ti, io.BytesIO(good))
        if kind == "symlink":
            ti = tarfile.TarInfo("etc")
            ti.type, ti.linkname = tarfile.SYMTYPE, "/etc"
            tf.addfile(ti)
        else:
            name = {"dotdot": "../evil", "absolute": "/tmp/lemonpack-evil"}[kind]
            ti = tarfile.TarInfo(name)
            ti.size = 4
            tf.addfile(ti, io.BytesIO(b"evil"))
    import gzip
    return gzip.compress(raw.getvalue(), mtime=0)


def _single_recipe(tmp_path, url, sha):
    return write_recipe(tmp_path / "evil.json", recipe_doc(
        "evil", display_name="Evil", capabilities=["completion"], variant_of="llamacpp", binary="llama-server",
        block={"source": url, "sha256": f"sha256:{sha}"}))


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_unsafe_archive_leaves_nothing(lp, site, tmp_path, home, kind):
    url = "https://example.invalid/evil/evil.tar.gz"
    sha = site.put(url, _evil_tar(kind))
    recipe = _single_recipe(tmp_path, url, sha)
    out = tmp_path / "out"
    before = set(tmp_path.iterdir())
    r = lp("build", recipe, "--out", out, "--mirror", site.base)
    assert r.code == 5 and "unsafe" in r.text.lower(), r  # UnsafeContentError
    assert not out.exists()
    assert set(tmp_path.iterdir()) - before <= {home.cache}
    assert not (tmp_path.parent / "evil").exists() and not os.path.exists("/tmp/lemonpack-evil")
    assert tree_files(home.cache / "layers") == set()
    # a pre-existing layout is unchanged
    good = site.pinned(ARCH, tmp_path / "recipes")
    ok = lp("build", good, "--out", out, "--mirror", site.base, "--os", "windows")
    assert ok.code == 0, ok
    index = (out / "index.json").read_bytes()
    files = tree_files(out)
    r = lp("build", recipe, "--out", out, "--mirror", site.base)
    assert r.code == 5, r
    assert (out / "index.json").read_bytes() == index and tree_files(out) == files
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(".")) == []


def test_non_layout_out_is_refused_untouched(lp, site, tmp_path):
    recipe = site.pinned(ARCH, tmp_path / "recipes")
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = lp("build", recipe, "--out", out, "--mirror", site.base)
    assert r.code != 0 and "not an OCI image layout" in r.text, r
    assert tree_files(out) == {"notes.txt"} and (out / "notes.txt").read_text() == "mine"
    f = tmp_path / "afile"
    f.write_text("x")
    r = lp("build", recipe, "--out", f, "--mirror", site.base)
    assert r.code != 0 and f.read_text() == "x", r


def test_mismatch_leaves_existing_layout_unchanged(lp, site, tmp_path, home):
    recipe = site.pinned(ARCH, tmp_path / "recipes")
    out = tmp_path / "out"
    assert lp("build", recipe, "--out", out, "--mirror", site.base).code == 0
    index = (out / "index.json").read_bytes()
    cached = tree_files(home.cache / "artifacts")
    # the server now serves other bytes for one artifact, with a cold cache for it
    url = "https://example.invalid/llamacpp-fork/gfx115x.tar.gz"
    old = site.hashes[url]
    new = site.put(url, tar_gz([("llama-server", b"#!/bin/sh\necho tampered\n", 0o755)]))
    (home.cache / "artifacts" / "sha256" / old).chmod(0o644)
    (home.cache / "artifacts" / "sha256" / old).unlink()
    r = lp("build", recipe, "--out", out, "--mirror", site.base)
    assert r.code == 3, r
    assert old in r.text and new in r.text, r
    assert (out / "index.json").read_bytes() == index
    assert tree_files(home.cache / "artifacts") == cached - {f"sha256/{old}"}


# ---------------------------------------------------------------- warm cache

def test_warm_cache_needs_no_network(lp, site, tmp_path):
    recipe = site.pinned(ARCH, tmp_path / "recipes")
    a = lp("build", recipe, "--out", tmp_path / "a", "--mirror", site.base, "--json")
    assert a.code == 0, a
    assert not any(t["from_cache"] for t in a.json()["targets"])
    site.stop()
    b = lp("build", recipe, "--out", tmp_path / "b", "--mirror", site.base, "--json")
    assert b.code == 0, b
    assert all(t["from_cache"] for t in b.json()["targets"] if t["source"])
    assert (tmp_path / "a" / "index.json").read_bytes() == (tmp_path / "b" / "index.json").read_bytes()


def test_cold_cache_with_server_down_fails_cleanly(lp, site, tmp_path):
    recipe = site.pinned(ARCH, tmp_path / "recipes")
    site.stop()
    r = lp("build", recipe, "--out", tmp_path / "out", "--mirror", site.base)
    assert r.code == 4 and not (tmp_path / "out").exists(), r


# ---------------------------------------------------------------- install

HOST_ROCM = json.dumps({"os": "linux", "accelerators": ["rocm"], "rocm_arch": "gfx1151"})
HOST_BOTH = json.dumps({"os": "linux", "accelerators": ["rocm", "cuda"], "rocm_arch": "gfx1151"})


def test_install_puts_binary_in_external_dir(lp, site, tmp_path, home, monkeypatch):
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", HOST_ROCM)
    recipe = site.pinned(LEMONADE / "llamacpp_per_platform.json", tmp_path / "recipes")
    r = lp("install", recipe, "--yes", "--mirror", site.base, "--accelerator", "rocm", "--json")
    assert r.code == 0, r
    binary = home.cache / "external" / "llamacpp-per-platform" / "llama-server"
    assert binary.is_file() and os.access(binary, os.X_OK)
    assert b"linux-rocm.tar.gz" in binary.read_bytes()
    assert r.json()["sha256"] == "sha256:" + site.hashes["https://example.invalid/llamacpp-fork/linux-rocm.tar.gz"]


def test_install_arch_override_from_host_facts(lp, site, tmp_path, home, monkeypatch):
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", HOST_ROCM)
    recipe = site.pinned(ARCH, tmp_path / "recipes")
    r = lp("install", recipe, "--yes", "--mirror", site.base, "--accelerator", "rocm")
    assert r.code == 0, r
    binary = home.cache / "external" / RID / "llama-server"
    assert b"gfx1151.tar.gz" in binary.read_bytes()


def test_install_ambiguity_names_the_choices(lp, site, tmp_path, home, monkeypatch):
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", HOST_BOTH)
    recipe = site.pinned(LEMONADE / "llamacpp_per_platform.json", tmp_path / "recipes")
    r = lp("install", recipe, "--yes", "--mirror", site.base)
    assert r.code != 0, r
    assert "rocm" in r.text and "cuda" in r.text and "--accelerator" in r.text, r
    assert not (home.cache / "external").exists() or tree_files(home.cache / "external") == set()
    assert site.requests == []


def test_install_without_yes_on_non_tty_refuses(lp, site, tmp_path, home, monkeypatch):
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", HOST_ROCM)
    recipe = site.pinned(LEMONADE / "llamacpp_per_platform.json", tmp_path / "recipes")
    r = lp("install", recipe, "--mirror", site.base, "--accelerator", "rocm")
    assert r.code != 0 and "--yes" in r.text, r
    assert tree_files(home.cache / "external") == set()
    assert site.requests == []


def test_install_subprocess_non_tty(site, tmp_path, home):
    """The real console script, stdin not a terminal: refuses; with --yes installs."""
    import subprocess
    recipe = site.pinned(LEMONADE / "llamacpp_per_platform.json", tmp_path / "recipes")
    env = {**os.environ, "LEMONPACK_HOST_FACTS": HOST_ROCM}
    argv = ["lemonpack", "install", str(recipe), "--mirror", site.base, "--accelerator", "rocm"]
    r = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "--yes" in r.stderr, r
    assert tree_files(home.cache / "external") == set()
    r = subprocess.run([*argv, "--yes"], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r
    assert (home.cache / "external" / "llamacpp-per-platform" / "llama-server").is_file()
