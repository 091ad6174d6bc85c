"""sources.json / default.nix: canonical bytes, and real nix-build against a loopback server."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from lemonpack.fetch.mirror import mirror_path
from lemonpack.nix import NixSource, attr_name, store_name, write_package_nix, write_recipe_json, write_sources_json
from lemonpack.nix.emit import nix_string, sources_document
from lemonpack.nix.hashes import sri_from_hex

needs_nix = pytest.mark.usefixtures("nix_installed")
REPO = Path(__file__).resolve().parents[2]
NIX_FLAGS = ["--option", "substituters", "", "--option", "connect-timeout", "1"]


def _src(name: str, url: str, data: bytes, **kw) -> NixSource:
    return NixSource(name=name, url=url, mirror_path=mirror_path(url),
                     sha256_hex=hashlib.sha256(data).hexdigest(), **kw)


def _nix(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, cwd=cwd, timeout=300)


def test_attr_and_store_names():
    assert attr_name("linux", "rocm", "gfx1151") == "linux-rocm-gfx1151"
    assert attr_name("windows", "cpu") == "windows-cpu"
    assert attr_name("linux", "vulkan", "gfx11.5") == "linux-vulkan-gfx11_5"
    with pytest.raises(ValueError):
        attr_name("1linux", "cpu")
    assert store_name("https://h/d/llama%20b1234-bin-ubuntu.tar.gz?x=1", "f") == "llama_b1234-bin-ubuntu.tar.gz"
    assert store_name("https://h/d/.hidden", "f") == "hidden"
    assert store_name("https://h/d/", "linux-cpu") == "linux-cpu"
    assert store_name("https://h/d/" + "a" * 300, "f") == "a" * 211
    assert store_name("https://h/%C3%BC%E2%82%AC.zip", "f") == "__.zip"


def test_nixsource_validation():
    ok = dict(name="linux-cpu", url="https://h/a", mirror_path="h/a", sha256_hex="0" * 64,
              os="linux", accelerator="cpu")
    NixSource(**ok)
    for bad in [dict(name="bad name"), dict(sha256_hex="0" * 63), dict(url="ftp://h/a"),
                dict(mirror_path="/h/a"), dict(mirror_path="h/../a"),
                dict(binary="/bin/sh"), dict(binary="../x"), dict(binary="")]:
        with pytest.raises(ValueError):
            NixSource(**{**ok, **bad})


def test_sources_json_canonical_and_deterministic(tmp_path):
    a = _src("linux-rocm-gfx1151", "https://github.com/o/r/releases/download/v1/rocm.tar.gz", b"a",
             os="linux", accelerator="rocm", gpu_arch="gfx1151", binary="bin/llama-server")
    b = _src("linux-cpu", "https://github.com/o/r/releases/download/v1/cpu.zip", b"b",
             os="linux", accelerator="cpu", cpu_arch="arm64")
    p1 = write_sources_json(tmp_path / "one", "org.example.llama", [a, b])
    p2 = write_sources_json(tmp_path / "two", "org.example.llama", [b, a])
    raw = p1.read_bytes()
    assert raw == p2.read_bytes() and raw.endswith(b"}\n")
    doc = json.loads(raw)
    assert list(doc["sources"]) == ["linux-cpu", "linux-rocm-gfx1151"]
    assert doc == {"recipe": "org.example.llama", "sources": {
        "linux-cpu": {"url": b.url, "mirrorPath": "github.com/o/r/releases/download/v1/cpu.zip",
                      "hash": sri_from_hex(hashlib.sha256(b"b").hexdigest()), "storeName": "cpu.zip",
                      "os": "linux", "accelerator": "cpu", "gpuArch": None, "binary": None,
                      "cpuArch": "arm64", "system": "aarch64-linux"},
        "linux-rocm-gfx1151": {"url": a.url, "mirrorPath": "github.com/o/r/releases/download/v1/rocm.tar.gz",
                               "hash": sri_from_hex(hashlib.sha256(b"a").hexdigest()),
                               "storeName": "rocm.tar.gz", "os": "linux", "accelerator": "rocm",
                               "gpuArch": "gfx1151", "binary": "bin/llama-server",
                               "cpuArch": "amd64", "system": "x86_64-linux"}}}
    assert raw == (json.dumps(doc, sort_keys=True, indent=2) + "\n").encode()
    assert sorted(os.listdir(tmp_path / "one")) == ["sources.json"]  # no temp files left


def test_nix_system_of_oci_platforms():
    from lemonpack.nix import nix_system

    assert nix_system("linux", "amd64") == "x86_64-linux"
    assert nix_system("linux", "arm64") == "aarch64-linux"
    assert nix_system("darwin", "arm64") == "aarch64-darwin"
    assert nix_system("windows", "amd64") == "x86_64-windows"
    for bad in (("plan9", "amd64"), ("linux", "vax")):
        with pytest.raises(ValueError, match="no Nix system"):
            nix_system(*bad)
    with pytest.raises(ValueError):
        NixSource(name="linux-cpu", url="https://h/a", mirror_path="h/a", sha256_hex="0" * 64, os="linux",
                  accelerator="cpu", cpu_arch="vax")


def test_duplicate_names_refused():
    a = _src("linux-cpu", "https://h/a", b"a", os="linux", accelerator="cpu")
    b = _src("linux-cpu", "https://h/b", b"b", os="linux", accelerator="cpu")
    with pytest.raises(ValueError, match="https://h/a.*https://h/b"):
        sources_document("r", [a, b])


def test_package_nix_deterministic(tmp_path):
    p = write_package_nix(tmp_path, "r")
    assert p.read_bytes() == write_package_nix(tmp_path / "again", "r").read_bytes()
    assert "{ pkgs ? null, lemonpack ? (if pkgs == null then null else pkgs.lemonpack or null), mirror ? null }:" in (
        p.read_text().splitlines())


@needs_nix
def test_nix_string_escaping_round_trips():
    tricky = 'a"b\\c${x}\n\t$ {y} ${'
    out = _nix("nix-instantiate", "--eval", "--json", "--expr", nix_string(tricky))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == tricky


@needs_nix
def test_pkgs_path_calls_pkgs_fetchurl(tmp_path):
    """With pkgs given, each attribute is a package whose artifact is pkgs.fetchurl { url;
    hash; name; } (the offline nixpkgs stand-in with a fetchurl that returns its arguments)."""
    s = _src("linux-cpu", "https://github.com/o/r/a%20b.tar.gz?x", b"z", os="linux", accelerator="cpu")
    write_sources_json(tmp_path, 'odd"id${x}', [s])
    write_recipe_json(tmp_path, b"{}\n")
    write_package_nix(tmp_path, 'odd"id${x}')
    pkgs = f"(import {REPO}/nix/offline-nixpkgs {{ system = \"x86_64-linux\"; }}) // {{ fetchurl = args: args; }}"
    for extra, url in [([], s.url),
                       (["--argstr", "mirror", "http://m.example/base/"],
                        "http://m.example/base/github.com/o/r/a%20b.tar.gz")]:
        out = _nix("nix-instantiate", "--eval", "--strict", "--json", str(tmp_path / "default.nix"),
                   "--arg", "pkgs", pkgs, "--arg", "lemonpack", "{ }", *extra, "-A", "linux-cpu.artifact")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {"url": url, "hash": sri_from_hex(s.sha256_hex), "name": "a_b.tar.gz"}
    out = _nix("nix-instantiate", "--eval", str(tmp_path / "default.nix"), "--arg", "pkgs", pkgs,
               "-A", "linux-cpu.name")
    assert out.returncode != 0 and "pass lemonpack" in out.stderr


@needs_nix
def test_recipe_id_mismatch_is_an_assertion(tmp_path):
    write_sources_json(tmp_path, "one", [])
    write_package_nix(tmp_path, "other")
    out = _nix("nix-instantiate", "--eval", "--strict", "--expr", f"import {tmp_path}/default.nix {{}}")
    assert out.returncode != 0 and "assertion" in out.stderr


@pytest.fixture
def served(server, tmp_path):
    """Two unique-per-run artifacts behind a mirror tree, and their generated Nix package."""
    rocm, cpu = os.urandom(65536), os.urandom(1000)
    a = _src("linux-rocm-gfx1151", "https://github.com/o/r/releases/download/v1/engine-rocm.tar.gz", rocm,
             os="linux", accelerator="rocm", gpu_arch="gfx1151", binary="bin/llama-server")
    b = _src("linux-cpu", f"{server.base}/direct/engine-cpu.zip", cpu, os="linux", accelerator="cpu")
    server.put(a.mirror_path, rocm)
    server.put(b.mirror_path, cpu)
    server.put("direct/engine-cpu.zip", cpu)
    out = tmp_path / "pkg"
    write_sources_json(out, "org.example.engine", [a, b])
    write_package_nix(out, "org.example.engine")
    return server, out, {"linux-rocm-gfx1151": rocm, "linux-cpu": cpu}


@pytest.mark.slow
@needs_nix
def test_nix_build_realises_through_mirror(served):
    server, pkg, data = served
    out = _nix("nix-build", str(pkg / "default.nix"), "--no-out-link", *NIX_FLAGS,
               "--argstr", "mirror", server.base, "-A", "linux-rocm-gfx1151")
    assert out.returncode == 0, out.stderr
    store_path = Path(out.stdout.strip().splitlines()[-1])
    assert store_path.name.endswith("-engine-rocm.tar.gz")
    assert store_path.read_bytes() == data["linux-rocm-gfx1151"]
    assert any(r.startswith("/github.com/o/r/releases/download/v1/engine-rocm.tar.gz") for r in server.requests)


@pytest.mark.slow
@needs_nix
def test_nix_build_without_mirror_uses_origin_url(served):
    server, pkg, data = served
    out = _nix("nix-build", str(pkg / "default.nix"), "--no-out-link", *NIX_FLAGS, "-A", "linux-cpu")
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip().splitlines()[-1]).read_bytes() == data["linux-cpu"]
    assert "/direct/engine-cpu.zip" in server.requests


@pytest.mark.slow
@needs_nix
def test_nix_build_wrong_hash_fails(served, tmp_path):
    server, pkg, data = served
    doc = json.loads((pkg / "sources.json").read_text())
    wrong = hashlib.sha256(os.urandom(16)).hexdigest()
    doc["sources"]["linux-rocm-gfx1151"]["hash"] = sri_from_hex(wrong)
    (pkg / "sources.json").write_text(json.dumps(doc))
    out = _nix("nix-build", str(pkg / "default.nix"), "--no-out-link", *NIX_FLAGS,
               "--argstr", "mirror", server.base, "-A", "linux-rocm-gfx1151")
    assert out.returncode != 0
    assert "hash mismatch" in out.stderr
    assert sri_from_hex(wrong) in out.stderr
    assert sri_from_hex(hashlib.sha256(data["linux-rocm-gfx1151"]).hexdigest()) in out.stderr


@needs_nix
def test_per_cpu_artifacts_give_meta_platforms_and_the_systems_own_artifact(tmp_path):
    """A source with another CPU's artifact (a recipe's per-CPU artifacts): meta.platforms is
    every system offered, and the package built on each system fetches that system's artifact
    and tells ``lemonpack unpack`` its CPU (evaluated with the offline nixpkgs stand-in)."""
    from lemonpack.nix.emit import NixArtifact

    src = _src("linux-cpu", "https://h.example/x86.tgz", b"x86", os="linux", accelerator="cpu", binary="srv",
               cpu_arch="amd64", others=(NixArtifact("arm64", "https://h.example/arm.tgz", "h.example/arm.tgz",
                                                     hashlib.sha256(b"arm").hexdigest()),))
    write_sources_json(tmp_path, "r", [src])
    write_recipe_json(tmp_path, b'{"recipe": "r"}\n')
    write_package_nix(tmp_path, "r")
    doc = json.loads((tmp_path / "sources.json").read_text())["sources"]["linux-cpu"]
    assert sorted(doc["systems"]) == ["aarch64-linux", "x86_64-linux"]
    for system, url, cpu in (("x86_64-linux", "https://h.example/x86.tgz", "amd64"),
                             ("aarch64-linux", "https://h.example/arm.tgz", "arm64")):
        expr = (f'let p = (import {tmp_path} {{ pkgs = import {REPO}/nix/offline-nixpkgs {{ system = "{system}"; }}; '
                f'lemonpack = "lp"; }}).linux-cpu; in [ p.meta.platforms p.src.url p.cpuArch ]')
        out = _nix("nix-instantiate", "--eval", "--strict", "--json", "--expr", expr)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == [["aarch64-linux", "x86_64-linux"], url, cpu]
    plain = _src("linux-cpu", "https://h.example/x86.tgz", b"x86", os="linux", accelerator="cpu")
    assert "systems" not in plain.to_json()  # one CPU: sources.json as before, meta.platforms [ system ]
