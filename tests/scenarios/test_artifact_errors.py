"""Artifact faults a new user hit: each names the recipe file and field, exits non-zero
without a traceback, and leaves nothing behind."""

import hashlib
import json

from support.buildkit import tar_gz

import pytest
from support.recipes import recipe_doc, write_recipe

pytestmark = pytest.mark.usefixtures("home")  # a private cache and config for every test

URL = "https://example.invalid/fork/linux-cpu.tar.gz"


def recipe(tmp_path, sha_hex, binary="llama-server"):
    """``fault.json``: a variant_of recipe whose linux/cpu block fetches :data:`URL` pinned to ``sha_hex``."""
    return write_recipe(tmp_path / "fault.json", recipe_doc(
        "fault-test", display_name="x", capabilities=["completion"], variant_of="llamacpp", binary=binary,
        block={"source": URL, "sha256": "sha256:" + sha_hex}))


def serve(site, data):
    site.put(URL, data)
    return hashlib.sha256(data).hexdigest()


def test_mismatch_names_recipe_file_and_field(tmp_path, site, lp):
    serve(site, tar_gz([("llama-server", b"#!/bin/sh\n", 0o755)]))
    r = recipe(tmp_path, "0" * 64)
    res = lp("build", r, "--out", tmp_path / "out", "--mirror", site.base)
    assert res.code == 3
    assert f"{r}: platforms.linux.cpu.source" in res.text and URL in res.text
    assert "expected sha256:" + "0" * 64 in res.text
    assert not (tmp_path / "out").exists()


def test_artifact_without_the_binary_is_refused_by_build_and_install(tmp_path, site, lp, monkeypatch):
    h = serve(site, tar_gz([("bin/llama-server", b"#!/bin/sh\n", 0o755)]))
    r = recipe(tmp_path, h)
    res = lp("build", r, "--out", tmp_path / "out", "--mirror", site.base)
    assert res.code == 1
    assert "has no 'llama-server' at its top level" in res.text and "bin/" in res.text
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", '{"os": "linux"}')
    res = lp("install", r, "--yes", "--mirror", site.base)
    assert res.code == 1 and "has no 'llama-server' at its top level" in res.text


def test_install_of_a_non_archive_is_a_clean_error(tmp_path, site, lp, monkeypatch, home):
    # a file that claims to be .tar.gz but is a truncated tar: not an archive lemonpack can read
    h = serve(site, b"\x1f\x8b" + b"\x00" * 40)
    r = recipe(tmp_path, h)
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", '{"os": "linux"}')
    res = lp("install", r, "--yes", "--mirror", site.base, "--json")
    assert res.code == 1
    err = json.loads(res.out)
    assert "platforms.linux.cpu.source" in err["message"] and "not a readable archive" in err["message"]
    assert not (home.cache / "external" / "fault-test").exists()


def test_same_recipe_twice_names_both_files(tmp_path, site, lp):
    h = serve(site, tar_gz([("llama-server", b"#!/bin/sh\n", 0o755)]))
    a = recipe(tmp_path, h)
    b = tmp_path / "copy.json"
    b.write_text(a.read_text())
    res = lp("build", a, b, "--out", tmp_path / "out", "--mirror", site.base)
    assert res.code == 1 and str(a) in res.text and str(b) in res.text


def test_install_by_discovered_recipe_id(tmp_path, site, lp, monkeypatch, home):
    h = serve(site, tar_gz([("llama-server", b"#!/bin/sh\n", 0o755)]))
    backends = tmp_path / "backends"
    backends.mkdir(mode=0o755)
    r = recipe(tmp_path, h)
    (backends / "fault-test.json").write_text(r.read_text())
    (backends / "fault-test.json").chmod(0o644)
    monkeypatch.setenv("LEMONPACK_BACKENDS_PATH", str(backends))
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", '{"os": "linux"}')
    res = lp("install", "fault-test", "--yes", "--mirror", site.base)
    assert res.code == 0, res.text
    assert (home.cache / "external" / "fault-test" / "llama-server").is_file()
    res = lp("install", "no-such-recipe", "--yes")
    assert res.code == 1 and "no-such-recipe" in res.text
