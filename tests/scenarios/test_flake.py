"""flake.nix with the real nix (Nix 2.8) and the offline nixpkgs stand-in (nix/offline-nixpkgs):
`nix build .#gufo` compiles the selection (lemonpack extensions build) and its gufo-registry
runs; overrides and overrideAttrs compose; Nix refuses what the CLI refuses, with the CLI's
message naming the user's manifest; overlays in both orders; recipes as packages whose
result/bin/<binary> serves HTTP; lemonpack as an app; `nix flake check`."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

import pytest

from support.extensions import manifest, write_extension
from support.helpers import free_port, wait_for
from support.nixflake import (OFFLINE_NIXPKGS, REPO, SYSTEM, consumer_flake, copy_flake, lock_offline, nix,
                              write_api, write_lock)
from support.tools import need

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("nix_installed")]

GEN = ("extensions.json", "gufo_ext_registry.cpp", "gufo_ext_constants.hpp")


def cli(*args: str | Path) -> subprocess.CompletedProcess:
    """This tree's ``lemonpack ARGS``."""
    return subprocess.run([sys.executable, "-m", "lemonpack.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "1000"})


def small_tree(root: Path) -> Path:
    """This repo's flake over a small tree: official ``beta`` (its provider needs hip) and
    ``alpha`` (depends on beta), lock ``[beta, alpha]``, API 0.1.2. The same content in every
    test, so the store paths (and builds) are shared."""
    copy_flake(root)
    write_api(root, minor=1, revision=2)
    ext = root / "catalogue" / "extensions"
    write_extension(ext / "beta", manifest("beta", requires=("linux", "hip")))
    write_extension(ext / "alpha", manifest("alpha", dependencies=["beta"],
                                            options=[{"name": "--alpha-mode", "commands": ["serve"],
                                                      "type": "choice", "help": "mode", "values": ["fast"]}]))
    write_lock(root, ["beta", "alpha"])
    return root


def gamma(directory: Path, **kw) -> Path:
    """A community extension ``gamma`` that compiles (support.extensions' stub sources)."""
    return write_extension(directory, manifest("gamma", **kw))


def result(cwd: Path) -> Path:
    return Path(os.readlink(cwd / "result"))


def registry(out: Path) -> list[tuple]:
    """What ``out/bin/gufo-registry --json`` registered: (extension, provider, available, reason)."""
    run = subprocess.run([str(out / "bin" / "gufo-registry"), "--json"], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    return [(p["extension"], p["provider"], p["available"], p["reason"]) for p in json.loads(run.stdout)]


def gufo_expr(tree: Path, override: str = "", attr: str = "") -> str:
    base = f'(builtins.getFlake "path:{tree}").packages.{SYSTEM}.gufo'
    return f"({base}{'.override ' + override if override else ''}){attr}"


def build_log(text: str) -> str:
    """The log lines of a failed build in Nix's stderr ("> LINE"), without the prefix."""
    return "\n".join(re.sub(r"^\s*> ?", "", line) for line in text.splitlines() if line.lstrip().startswith(">"))


def test_gufo_compiles_the_release_lock_and_its_registry_runs(tmp_path):
    tree = small_tree(tmp_path / "repo")
    out = nix("build", f"path:{tree}#gufo", cwd=tree, timeout=600)
    assert out.returncode == 0, out.stderr
    pkg = result(tree)
    assert registry(pkg) == [("beta", "beta-p", False, "target beta_lib not built: needs hip"),
                             ("alpha", "alpha-p", True, None)]
    assert (pkg / "lib" / "libgufo-ext.a").read_bytes().startswith(b"!<arch>\n")
    assert (pkg / "include" / "gufo" / "ext" / "registry.hpp").is_file()
    assert (pkg / "include" / "gufo_ext_constants.hpp").is_file()
    # share/gufo: exactly what the CLI generates, the lock, and the selected extensions' files
    gen = cli("extensions", "generate", "--tree", tree, "--out", tmp_path / "gen", "--feature", "linux")
    assert gen.returncode == 0, gen.stderr
    for name in GEN:
        assert (pkg / "share/gufo" / name).read_bytes() == (tmp_path / "gen" / name).read_bytes(), name
    assert (pkg / "share/gufo/extensions.lock").read_bytes() == (tree / "extensions.lock").read_bytes()
    for rel in ("alpha/extension.json", "beta/extension.cpp"):
        assert (pkg / "share/gufo/extensions" / rel).read_bytes() == (
            tree / "catalogue/extensions" / rel).read_bytes()


def test_consumer_flake_override_compiles_a_community_extension(tmp_path):
    tree = small_tree(tmp_path / "repo")
    app = tmp_path / "app"
    gamma(app / "community" / "gamma")
    consumer_flake(app, tree, '{ extensions = [ "alpha" ./community/gamma ]; features = [ "linux" "hip" ]; }')
    out = nix("build", f"path:{app}", cwd=app, timeout=600)
    assert out.returncode == 0, out.stderr
    # dependencies close the selection (beta, now built with hip); lock order, then community
    assert registry(result(app)) == [("beta", "beta-p", True, None), ("alpha", "alpha-p", True, None),
                                     ("gamma", "gamma-p", True, None)]


def test_override_and_override_attrs_compose_in_either_order(tmp_path):
    tree = small_tree(tmp_path / "repo")
    g = tmp_path / "c" / "gamma"
    gamma(g)
    attrs = '(o: { postInstall = "touch $out/marker"; })'
    first = "(" + gufo_expr(tree, attr=f".overrideAttrs {attrs}") + f").override {{ extensions = [ {g} ]; }}"
    second = gufo_expr(tree, f"{{ extensions = [ {g} ]; }}", f".overrideAttrs {attrs}")
    paths = []
    for expr in (first, second, gufo_expr(tree, f"{{ extensions = [ {g} ]; }}")):
        out = nix("eval", "--impure", "--raw", "--expr", f"({expr}).drvPath")
        assert out.returncode == 0, out.stderr
        paths.append(out.stdout)
    assert paths[0] == paths[1] != paths[2]
    built = nix("build", "--impure", "--expr", first, cwd=tmp_path, timeout=600)
    assert built.returncode == 0, built.stderr
    assert (result(tmp_path) / "marker").is_file()
    assert registry(result(tmp_path)) == [("gamma", "gamma-p", True, None)]


def test_readme_override_snippet_builds(tmp_path):
    """The Nix section of docs/building-and-nix.md: its `gufo.override` lines, pasted into a consumer flake with a
    community extension at ./path/to/community-extension, build that selection."""
    readme = (REPO / "docs" / "building-and-nix.md").read_text()
    section = re.search(r"^## Nix\n(.*?)(?=^## |\Z)", readme, re.S | re.M).group(1)
    snippet = re.search(r"^```nix\n(.*?)^```", section, re.S | re.M).group(1).replace("x86_64-linux", SYSTEM)
    tree = copy_flake(tmp_path / "repo", with_repo_tree=True)
    app = tmp_path / "app"
    write_extension(app / "path/to/community-extension", manifest("fish_drama3", keys=["gguf:fishdrama3"]))
    app.joinpath("flake.nix").write_text(
        f'{{\n  inputs.lemonpack.url = "path:{tree}";\n  outputs = {{ self, lemonpack }}: {{\n{snippet}  }};\n}}\n')
    lock_offline(app)
    out = nix("build", f"path:{app}", cwd=app, timeout=900)
    assert out.returncode == 0, out.stderr
    pkg = result(app)
    doc = json.loads((pkg / "share/gufo/extensions.json").read_bytes())
    assert [(e["name"], e["official"]) for e in doc["extensions"]] == [("qwen", True), ("fish_drama3", False)]
    assert doc["features"] == ["hip", "linux"]
    assert {p[0] for p in registry(pkg)} == {"qwen", "fish_drama3"}
    # the generated registry compiles against the package's include/ alone
    compiled = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", f"-I{pkg / 'include'}",
                               str(pkg / "share/gufo/gufo_ext_registry.cpp")],
                              capture_output=True, text=True, timeout=120)
    assert compiled.returncode == 0, compiled.stderr


def test_large_and_many_files_build(tmp_path):
    """A 3 MB file and 300 small ones in an extension: no size limit in the Nix package."""
    tree = small_tree(tmp_path / "repo")
    doc = manifest("bigk")
    doc["files"] = ["extension.cpp", "kernels/table.hip"] + [f"kernels/t{i:03}.hip" for i in range(300)]
    d = write_extension(tmp_path / "c" / "bigk", doc)
    (d / "kernels").mkdir()
    big = b"// tuned gemm tile table 0123456789abcdef0123456789abcdef0123456789abcdef\n" * 42000
    (d / "kernels" / "table.hip").write_bytes(big)
    for i in range(300):
        (d / "kernels" / f"t{i:03}.hip").write_text(f"// {i}\n")
    gen = cli("extensions", "generate", "--tree", tree, "--out", tmp_path / "gen", "--select", d)
    assert gen.returncode == 0, gen.stderr
    out = nix("build", "--impure", "--expr", gufo_expr(tree, f"{{ extensions = [ {d} ]; }}"), cwd=tmp_path,
              timeout=600)
    assert out.returncode == 0, out.stderr
    share = result(tmp_path) / "share/gufo/extensions/bigk"
    assert (share / "kernels/table.hip").read_bytes() == big
    assert len(list((share / "kernels").iterdir())) == 301


BAD = {
    # what: (manifest changes, extra files) -> the CLI rejects it
    "unknown field, bad name, escaping file": (
        {"licence": "MIT", "name": "my-ext", "files": ["../../../../etc/passwd"]}, {}),
    "wrong type": ({"version": 1}, {}),
    "absolute file": ({"files": ["/etc/passwd"]}, {}),
    "collision with an official key": ({"providers": [dict(manifest("gamma")["providers"][0], keys=["gguf:alpha"])]},
                                       {}),
    "newer api": ({"api_version": ">= 0.1.9"}, {}),
    "missing dependency": ({"dependencies": ["nowhere"]}, {}),
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_nix_refuses_what_the_cli_refuses_with_its_message(tmp_path, what):
    """The selection's build fails with the CLI's message (`lemonpack extensions generate
    --select DIR`) word for word, naming the user's manifest (not its store copy); evaluation
    succeeds (no import from derivation)."""
    tree = small_tree(tmp_path / "repo")
    changes, _ = BAD[what]
    d = tmp_path / "c" / "gamma"
    gamma(d)
    doc = json.loads((d / "extension.json").read_text())
    (d / "extension.json").write_text(json.dumps({**doc, **changes}))
    gen = cli("extensions", "generate", "--json", "--tree", tree, "--out", tmp_path / "gen", "--select", d)
    assert gen.returncode == 1, gen.stdout
    message = json.loads(gen.stdout)["message"]
    out = nix("eval", "--impure", "--raw", "--expr", gufo_expr(tree, f"{{ extensions = [ {d} ]; }}", ".drvPath"))
    assert out.returncode == 0, out.stderr
    out = nix("build", "--impure", "--no-link", "--expr", gufo_expr(tree, f"{{ extensions = [ {d} ]; }}"), timeout=600)
    assert out.returncode == 1, out.stdout
    # the official tree is the flake's, in the store; the user's directory is named as given
    shown = re.sub(r"/nix/store/[0-9a-z]{32}-gufo-tree", str(tree), build_log(out.stderr))
    assert shown.endswith(message), f"cli: {message}\nnix: {out.stderr}"
    assert "gufo-input" not in out.stderr


def test_non_utf8_manifest_is_named(tmp_path):
    tree = small_tree(tmp_path / "repo")
    d = tmp_path / "c" / "badutf"
    d.mkdir(parents=True)
    (d / "extension.json").write_bytes(b'{"name": "badutf", "description": "caf\xe9"}\n')
    out = nix("build", "--impure", "--no-link", "--expr", gufo_expr(tree, f"{{ extensions = [ {d} ]; }}"), timeout=600)
    assert out.returncode == 1
    assert re.search(rf"{re.escape(str(d))}/extension.json: not UTF-8 text: byte 0xe9 at offset \d+", out.stderr), (
        out.stderr)


def test_symlinked_extension_directory_counts_once(tmp_path):
    tree = small_tree(tmp_path / "repo")
    gamma(tmp_path / "exts" / "real")
    (tmp_path / "exts" / "zz_alias").symlink_to("real")
    override = f'{{ extensionDirs = [ {tmp_path / "exts"} ]; extensions = [ "gamma" ]; }}'
    out = nix("eval", "--impure", "--json", "--expr",
              f"map (e: e.name) {gufo_expr(tree, override, '.selection.extensions')}")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["gamma"]
    listed = cli("extensions", "list", "--json", "--tree", tree, "--extension-dir", tmp_path / "exts",
                 "--select", "gamma")
    assert [e["name"] for e in json.loads(listed.stdout)["extensions"] if e["selected"]] == ["gamma"]


def test_unknown_feature_and_stale_lock_fail_the_build_with_the_cli_message(tmp_path):
    from lemonpack.extensions.manifest import REQUIREMENTS

    tree = small_tree(tmp_path / "repo")
    out = nix("build", "--impure", "--no-link", "--expr", gufo_expr(tree, '{ features = [ "linux" "gpu" ]; }'),
              timeout=600)
    assert out.returncode == 1
    assert build_log(out.stderr).endswith(f"unknown feature 'gpu' (one of {', '.join(REQUIREMENTS)})"), out.stderr
    write_lock(tree, ["beta", "alpha", "gone"])
    out = nix("build", "--no-link", f"path:{tree}#gufo", cwd=tree, timeout=600)
    assert out.returncode == 1
    assert "extensions.lock: extensions[2]: 'gone' names no extension in /nix/store/" in out.stderr, out.stderr


def overlay_expr(tree: Path, order: str, result_attr: str) -> str:
    """``import nixpkgs { overlays = ...; }`` with lemonpack's overlay and a user overlay
    (customising gufo and fetchurl) in ``order``: "lp-first" or "user-first"."""
    return (f'let lp = builtins.getFlake "path:{tree}"; nixpkgs = import {OFFLINE_NIXPKGS}; '
            'user = final: prev: { gufo = prev.gufo.override { extensions = [ "alpha" ]; features = [ "linux" "hip" ]; }; }; '
            'fetches = final: prev: { fetchurl = args: prev.fetchurl args // { viaUserOverlay = true; }; }; '
            f'pkgs = nixpkgs {{ system = "{SYSTEM}"; overlays = '
            + ("[ lp.overlays.default fetches user ]" if order == "lp-first" else "[ fetches user lp.overlays.default ]")
            + f'; }}; in {result_attr}')


def test_overlays_in_both_orders(tmp_path):
    tree = small_tree(tmp_path / "repo")
    names = "map (e: e.name) pkgs.gufo.selection.extensions"
    after = nix("eval", "--impure", "--json", "--expr", overlay_expr(tree, "lp-first", names))
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout) == ["beta", "alpha"]
    # the user's overlay customising a gufo not yet defined fails there: never silently dropped
    before = nix("eval", "--impure", "--json", "--expr", overlay_expr(tree, "user-first", names))
    assert before.returncode == 1 and "attribute 'gufo' missing" in before.stderr, before.stderr
    # a gufo an earlier overlay defines is kept
    defined = (f'let lp = builtins.getFlake "path:{tree}"; pkgs = import {OFFLINE_NIXPKGS} {{ system = "{SYSTEM}"; '
               'overlays = [ (final: prev: { gufo = { mine = true; }; }) lp.overlays.default ]; }; in pkgs.gufo.mine')
    kept = nix("eval", "--impure", "--json", "--expr", defined)
    assert kept.returncode == 0 and json.loads(kept.stdout) is True, kept.stderr
    # an overlay changing fetchurl is what the recipe packages fetch with, in either order
    for order in ("lp-first", "user-first"):
        expr = overlay_expr(tree, order, 'pkgs.lemonpackRecipes.hello-engine.linux-cpu.artifact.viaUserOverlay or false')
        out = nix("eval", "--impure", "--json", "--expr", expr.replace("gufo = prev.gufo.override", "x = prev.gufo.override"))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) is True, order
    # a package set that is not nixpkgs (the overlay takes what it lacks from the flake's input)
    minimal = (f'let lp = builtins.getFlake "path:{tree}"; '
               f'final = {{ stdenv.hostPlatform.system = "{SYSTEM}"; fetchurl = args: {{ fetched = args; }}; }} // o; '
               'o = lp.overlays.default final { }; in '
               '{ names = map (e: e.name) o.gufo.selection.extensions; '
               'fetched = o.lemonpackRecipes.hello-engine.linux-cpu.artifact.fetched.url; }')
    out = nix("eval", "--impure", "--json", "--expr", minimal)
    assert out.returncode == 0, out.stderr
    source = json.loads((REPO / "nix/recipes/hello-engine/sources.json").read_text())["sources"]["linux-cpu"]
    assert json.loads(out.stdout) == {"names": ["beta", "alpha"], "fetched": source["url"]}


def test_recipe_files_are_what_lemonpack_build_emits(tmp_path):
    out = cli("build", "--example", "--cpu-arch", "amd64", "--out", tmp_path / "oci")
    assert out.returncode == 0, out.stderr
    emitted = sorted(p.name for p in (tmp_path / "oci/nix/hello-engine").iterdir())
    assert emitted == ["default.nix", "recipe.json", "sources.json"]
    for name in emitted:
        assert (tmp_path / "oci/nix/hello-engine" / name).read_bytes() == (
            REPO / "nix/recipes/hello-engine" / name).read_bytes(), f"nix/recipes/hello-engine/{name} is stale"


def test_recipe_package_runs_and_answers_health(tmp_path):
    """`nix build .#hello-engine`: the artifact (added to the store first: its origin
    example.invalid does not resolve) unpacked, result/bin/hello-engine serves /health."""
    from lemonpack.examples import EXAMPLE_ARCHIVE, EXAMPLE_RECIPE

    add = subprocess.run([need("nix-store"), "--add-fixed", "sha256", str(EXAMPLE_ARCHIVE)],
                         capture_output=True, text=True, timeout=60)
    assert add.returncode == 0, add.stderr
    tree = small_tree(tmp_path / "repo")
    out = nix("build", f"path:{tree}#hello-engine", cwd=tree, timeout=600)
    assert out.returncode == 0, out.stderr
    pkg = result(tree)
    assert os.readlink(pkg / "bin" / "hello-engine") == "../libexec/hello-engine/hello-engine"
    assert (pkg / "share/lemonpack/hello-engine.json").read_bytes() == (
        REPO / "nix/recipes/hello-engine/recipe.json").read_bytes()
    assert json.loads((pkg / "share/lemonpack/hello-engine.json").read_text())["recipe"] == (
        json.loads(Path(EXAMPLE_RECIPE).read_text())["recipe"])
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    port = free_port()
    proc = subprocess.Popen([str(tree / "result/bin/hello-engine"), "--host", "127.0.0.1", "--port", str(port),
                             "-m", str(model)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    return r.status == 200 and json.loads(r.read()) == {"status": "ok"}
            except OSError:
                return False
        assert wait_for(healthy, timeout=20), proc.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_generated_package_unpacks_with_install_rules(tmp_path, server):
    """A `lemonpack build`-style default.nix given nixpkgs (the stand-in) and the flake's
    lemonpack: a served tar.gz becomes bin/<binary>; a member escaping the tree fails the
    build with lemonpack unpack's message."""
    from lemonpack.fetch.mirror import mirror_path
    from lemonpack.nix import NixSource, write_package_nix, write_recipe_json, write_sources_json

    tree = small_tree(tmp_path / "repo")

    def package(name: str, members: dict[str, bytes]) -> Path:
        art = tmp_path / f"{name}.tar.gz"
        with tarfile.open(art, "w:gz") as tf:
            for rel, data in members.items():
                info = tarfile.TarInfo(rel)
                info.size, info.mode = len(data), 0o755
                tf.addfile(info, io.BytesIO(data))
        url = f"{server.base}/{name}-{os.urandom(4).hex()}.tar.gz"
        server.put(url.rsplit("/", 1)[1], art.read_bytes())
        src = NixSource(name="linux-cpu", url=url, mirror_path=mirror_path(url),
                        sha256_hex=hashlib.sha256(art.read_bytes()).hexdigest(),
                        os="linux", accelerator="cpu", binary="bin/engine")
        out = tmp_path / name
        write_sources_json(out, f"org.example.{name}", [src])
        write_recipe_json(out, b'{"recipe": "org.example.%s"}\n' % name.encode())
        write_package_nix(out, f"org.example.{name}")
        return out

    def build(pkg: Path) -> subprocess.CompletedProcess:
        return nix("build", "--impure", "--no-link", "--expr",
                   f'let lp = (builtins.getFlake "path:{tree}").packages.{SYSTEM}; in '
                   f'(import {pkg} {{ pkgs = import {OFFLINE_NIXPKGS} {{ system = "{SYSTEM}"; }}; '
                   f'lemonpack = lp.lemonpack; }}).linux-cpu', timeout=600)

    good = package("good", {"bin/engine": b"#!/bin/sh\necho engine-ran\n", "lib/tool": Path("/bin/true").read_bytes()})
    out = build(good)
    assert out.returncode == 0, out.stderr
    linked = nix("build", "--impure", "-o", str(tmp_path / "res"), "--expr",
                 f'let lp = (builtins.getFlake "path:{tree}").packages.{SYSTEM}; in '
                 f'(import {good} {{ pkgs = import {OFFLINE_NIXPKGS} {{ system = "{SYSTEM}"; }}; '
                 f'lemonpack = lp.lemonpack; }}).linux-cpu')
    assert linked.returncode == 0, linked.stderr
    ran = subprocess.run([str(tmp_path / "res/bin/engine")], capture_output=True, text=True, timeout=10)
    assert ran.stdout == "engine-ran\n"
    assert (tmp_path / "res/share/lemonpack/org.example.good.json").is_file()
    # autoPatchelfHook ran over the prebuilt ELF file: its interpreter is the C library's loader
    tool = (tmp_path / "res/libexec/org.example.good/lib/tool").resolve()
    interp = [need("patchelf"), "--print-interpreter"]
    assert subprocess.run([*interp, str(tool)], capture_output=True, text=True).stdout == subprocess.run(
        [*interp, "/bin/sh"], capture_output=True, text=True).stdout
    bad = build(package("bad", {"bin/engine": b"#!/bin/sh\n", "../escape": b"x"}))
    assert bad.returncode == 1
    assert "unsafe member '../escape'" in bad.stderr, bad.stderr


def test_lemonpack_app_runs(tmp_path):
    tree = small_tree(tmp_path / "repo")
    out = nix("run", f"path:{tree}#lemonpack", "--", "unpack", "--help", cwd=tree, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "install's safety rules" in out.stdout


def test_lemonpack_package_carries_the_extension_tree(tmp_path):
    """The package's extension tree (symlinks in lemonpack/extensions/tree/, kept as the
    checkout holds them) reaches the store: the packaged CLI lists the official extensions
    from a directory that is no checkout."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for part in ("flake.nix", "pyproject.toml", "README.md", "nix", "lemonpack", "catalogue", "api",
                 "extensions.lock", "include"):
        src = REPO / part
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, repo / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, repo / part, follow_symlinks=False)
    lock_offline(repo)
    built = nix("build", f"path:{repo}#lemonpack", "-o", str(tmp_path / "res"), cwd=repo, timeout=600)
    assert built.returncode == 0, built.stderr
    out = subprocess.run([str(tmp_path / "res/bin/lemonpack"), "extensions", "list", "--json", "--feature", "linux"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lock = json.loads((REPO / "extensions.lock").read_text())["extensions"]
    assert [e["name"] for e in json.loads(out.stdout)["extensions"] if e["official"]] == lock


def test_flake_show_lists_the_outputs_without_building(tmp_path):
    """`nix flake show` needs no build for any system (package names do not depend on the
    selection)."""
    tree = small_tree(tmp_path / "repo")
    out = nix("flake", "show", "--json", f"path:{tree}", cwd=tree)
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert sorted(shown["packages"]["x86_64-linux"]) == [
        "default", "gufo", "hello-engine", "hello-engine-linux-cpu", "lemonpack"]
    # the example's artifact is for amd64: not offered on aarch64-linux (meta.platforms)
    assert sorted(shown["packages"]["aarch64-linux"]) == ["default", "gufo", "lemonpack"]
    for system in ("x86_64-linux", "aarch64-linux"):
        assert sorted(shown["apps"][system]) == ["default", "lemonpack"]
    assert shown["overlays"] == {"default": {"type": "nixpkgs-overlay"}}


def test_checks_build(tmp_path):
    """The flake's checks for this system build (`nix flake check`, which evaluates every
    system's, is tests/scenarios/test_issue26_flake.py's)."""
    tree = small_tree(tmp_path / "repo")
    for check in ("gufo-registry", "lemonpack"):
        out = nix("build", "--no-link", f"path:{tree}#checks.{SYSTEM}.{check}", cwd=tree, timeout=600)
        assert out.returncode == 0, out.stderr
