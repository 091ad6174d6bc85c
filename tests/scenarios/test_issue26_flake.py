"""The flake as a nixpkgs user meets it (issue 26, cases 67-69 of /work/shared/cases), with
the real nix (2.8) and the offline stand-in: `gufo.override` arguments mean what nixpkgs users
expect, `nix flake check` passes on a machine that builds one system (no import from
derivation), every package has meta.license/platforms/description/mainProgram, a selection the
CLI refuses fails the *build* with the CLI's message, and a recipe package whose ELF needs a
library its inputs lack fails to build (autoPatchelfHook), as with nixpkgs."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from support.extensions import manifest, write_extension
from support.nixflake import OFFLINE_NIXPKGS, REPO, SYSTEM, copy_flake, nix
from support.tools import need

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("nix_installed")]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """This repository's flake and extension tree, copied and locked offline (once)."""
    return copy_flake(tmp_path_factory.mktemp("i26") / "repo", with_repo_tree=True)


def gufo(tree: Path, override: str, attr: str) -> str:
    return f'((builtins.getFlake "path:{tree}").packages.{SYSTEM}.gufo.override {override}){attr}'


def test_extensions_argument_means_what_nixpkgs_users_expect(tree):
    """Case 67: `extensions = [ ]` is no extension (not the release lock); a string other than
    "all" is a type error naming the argument; null is the release lock."""
    lock = json.loads((REPO / "extensions.lock").read_text())["extensions"]
    names = "map (e: e.name) ({}).selection.extensions"
    out = nix("eval", "--impure", "--json", "--expr", names.format(gufo(tree, "{ extensions = [ ]; }", "")))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
    out = nix("eval", "--impure", "--json", "--expr", names.format(gufo(tree, "{ extensions = null; }", "")))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == lock
    for bad, shown in (('"qwen"', 'the string "qwen"'), ("42", "a int"), ('[ "qwen" 3 ]', "a int")):
        out = nix("eval", "--impure", "--raw", "--expr", gufo(tree, f"{{ extensions = {bad}; }}", ".drvPath"))
        assert out.returncode == 1
        assert "gufo: the argument 'extensions' must be" in out.stderr and f"not {shown}" in out.stderr, out.stderr
    out = nix("eval", "--impure", "--raw", "--expr", gufo(tree, '{ features = "linux"; }', ".drvPath"))
    assert out.returncode == 1 and "the argument 'features' must be a list" in out.stderr, out.stderr


def test_features_are_never_probed_from_the_builder(tree):
    """Case 67: the features the CLI gets are the expression's ([ "linux" ] by default; [ ] is
    the empty set, `--feature none`), never the builder's probe (hip where /dev/kfd exists):
    the same expression gives the same derivation, and its arguments say so."""
    for override, want in (("{ }", ["--feature", "linux"]), ("{ features = [ ]; }", ["--feature", "none"]),
                           ('{ features = [ "linux" "hip" ]; }', ["--feature", "linux", "--feature", "hip"])):
        out = nix("eval", "--impure", "--raw", "--expr", gufo(tree, override, ".verdict.lemonpackArgs"))
        assert out.returncode == 0, out.stderr
        args = out.stdout.splitlines()
        assert [a for i, a in enumerate(args) if a == "--feature" or i and args[i - 1] == "--feature"] == want
    out = nix("eval", "--impure", "--json", "--expr",
              "({}).selection.features".format(gufo(tree, "{ features = [ ]; extensions = [ ]; }", "")))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_flake_check_passes_on_a_one_system_machine(tree):
    """Case 68: `nix flake check` evaluates aarch64-linux's packages and checks too; with no
    import from derivation that needs no aarch64 builder."""
    out = nix("flake", "check", f"path:{tree}", cwd=tree, timeout=900)
    assert out.returncode == 0, out.stderr
    # and aarch64-linux's gufo evaluates to a derivation here (its drvPath needs no build)
    other = "aarch64-linux" if SYSTEM == "x86_64-linux" else "x86_64-linux"
    out = nix("eval", "--raw", f"path:{tree}#packages.{other}.gufo.drvPath", cwd=tree)
    assert out.returncode == 0 and out.stdout.endswith(".drv"), out.stderr


def test_every_package_has_complete_meta(tree):
    """Case 69 and issue 26 point 1: gufo, lemonpack and the recipe packages carry description,
    platforms, mainProgram, and gufo/lemonpack a licence (nixpkgs' check-meta.nix and Hydra read
    them)."""
    expr = (f'let p = (builtins.getFlake "path:{tree}").packages.{SYSTEM}; in '
            'builtins.mapAttrs (n: v: { inherit (v.meta) description platforms mainProgram; '
            'license = v.meta.license.spdxId or null; }) p')
    out = nix("eval", "--impure", "--json", "--expr", expr)
    assert out.returncode == 0, out.stderr
    meta = json.loads(out.stdout)
    assert meta["gufo"]["license"] == meta["lemonpack"]["license"] == "Apache-2.0"
    assert meta["gufo"]["mainProgram"] == "gufo-registry" and meta["lemonpack"]["mainProgram"] == "lemonpack"
    assert SYSTEM in meta["gufo"]["platforms"] and "aarch64-linux" in meta["gufo"]["platforms"]
    assert meta["hello-engine"] == {"description": "hello-engine engine (linux-cpu), built by lemonpack",
                                    "platforms": ["x86_64-linux"], "mainProgram": "hello-engine",
                                    "license": "Apache-2.0"}


def test_recipe_package_is_unsupported_on_another_cpu(tree):
    """A recipe package is for its artifact's CPU (sources.json cpuArch/system): on another
    system it is marked unsupported (meta.available false; its derivation is refused with
    check-meta.nix's message) and packages.<that system> does not offer it."""
    out = nix("eval", "--json", f"path:{tree}#packages.aarch64-linux", "--apply", "builtins.attrNames", cwd=tree)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["default", "gufo", "lemonpack"]
    expr = (f'let lp = builtins.getFlake "path:{tree}"; pkgs = import {OFFLINE_NIXPKGS} '
            '{ system = "aarch64-linux"; overlays = [ lp.overlays.default ]; }; '
            'in pkgs.lemonpackRecipes.hello-engine.linux-cpu')
    out = nix("eval", "--impure", "--json", "--expr", f"({expr}).meta.available")
    assert out.returncode == 0 and json.loads(out.stdout) is False, out.stderr
    out = nix("eval", "--impure", "--raw", "--expr", f"({expr}).drvPath")
    assert out.returncode == 1
    assert "is not available on the requested hostPlatform" in out.stderr, out.stderr


def test_refused_selection_fails_the_build_with_the_cli_message(tree, tmp_path):
    """Issue 26 point 3: evaluation succeeds (no IFD); the build fails, its log ending with
    `lemonpack extensions generate`'s message, naming the user's manifest as given."""
    d = write_extension(tmp_path / "c" / "gamma", manifest("gamma"))
    doc = json.loads((d / "extension.json").read_text())
    (d / "extension.json").write_text(json.dumps({**doc, "version": 1}))
    gen = subprocess.run(["python3", "-m", "lemonpack.cli", "extensions", "generate", "--json", "--tree", str(tree),
                          "--out", str(tmp_path / "gen"), "--select", str(d), "--feature", "linux"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert gen.returncode == 1, gen.stdout
    message = json.loads(gen.stdout)["message"]
    assert str(d / "extension.json") in message
    out = nix("eval", "--impure", "--raw", "--expr", gufo(tree, f"{{ extensions = [ {d} ]; }}", ".drvPath"))
    assert out.returncode == 0, out.stderr
    built = nix("build", "--impure", "--no-link", "--expr", gufo(tree, f"{{ extensions = [ {d} ]; }}", ""),
                timeout=600)
    assert built.returncode == 1
    assert "gufo-selection.drv' failed" in built.stderr, built.stderr
    shown = re.sub(r"/nix/store/[0-9a-z]{32}-gufo-tree", str(tree), built.stderr)
    log = "\n".join(re.sub(r"^\s*> ?", "", line) for line in shown.splitlines() if line.lstrip().startswith(">"))
    assert log.endswith(message), built.stderr
    assert "gufo-input" not in built.stderr


def _elf_engine(tmp_path: Path, needed: str | None) -> bytes:
    """A tar.gz holding bin/engine: a C++ program (NEEDED libstdc++.so.6, from the gcc runtime
    the package lists), with ``needed`` added as one more NEEDED entry and a wrong interpreter
    (autoPatchelfHook must set the right one)."""
    src = tmp_path / "engine.cpp"
    src.write_text('#include <iostream>\nint main() { std::cout << "engine-ran" << std::endl; }\n')
    exe = tmp_path / "engine"
    subprocess.run(["g++", "-O0", "-o", str(exe), str(src)], check=True, timeout=120)
    patchelf = need("patchelf")
    subprocess.run([patchelf, "--set-interpreter", "/nix/store/nothing-here/ld.so", str(exe)], check=True)
    if needed:
        subprocess.run([patchelf, "--add-needed", needed, str(exe)], check=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = exe.read_bytes()
        info = tarfile.TarInfo("bin/engine")
        info.size, info.mode = len(data), 0o755
        tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_recipe_package_with_an_unlisted_library_fails_to_build(tree, tmp_path, server):
    """Issue 26 proof: a recipe package whose ELF needs a library not in its inputs
    (libssl.so.3: on this host, but not in buildInputs) fails to build, autoPatchelfHook naming
    it, as nixpkgs' auto-patchelf.py does; with only libstdc++ (the inputs' gcc runtime) it
    builds, its interpreter set to the C library's loader, and runs."""
    from lemonpack.fetch.mirror import mirror_path
    from lemonpack.nix import NixSource, write_package_nix, write_recipe_json, write_sources_json

    def package(name: str, needed: str | None) -> Path:
        (tmp_path / name).mkdir()
        art = _elf_engine(tmp_path / name, needed)
        url = f"{server.base}/{name}-{os.urandom(4).hex()}.tar.gz"
        server.put(url.rsplit("/", 1)[1], art)
        out = tmp_path / f"pkg-{name}"
        write_sources_json(out, f"org.example.{name}", [NixSource(
            name="linux-cpu", url=url, mirror_path=mirror_path(url), sha256_hex=hashlib.sha256(art).hexdigest(),
            os="linux", accelerator="cpu", binary="bin/engine", cpu_arch={"x86_64-linux": "amd64"}.get(SYSTEM, "arm64"))])
        write_recipe_json(out, b'{"recipe": "org.example.%s"}\n' % name.encode())
        write_package_nix(out, f"org.example.{name}")
        return out

    def build(pkg: Path, link: Path) -> subprocess.CompletedProcess:
        return nix("build", "--impure", "-o", str(link), "--expr",
                   f'let lp = (builtins.getFlake "path:{tree}").packages.{SYSTEM}; in '
                   f'(import {pkg} {{ pkgs = import {OFFLINE_NIXPKGS} {{ system = "{SYSTEM}"; }}; '
                   f'lemonpack = lp.lemonpack; }}).linux-cpu', timeout=600)

    bad = build(package("needs-ssl", "libssl.so.3"), tmp_path / "bad")
    assert bad.returncode == 1
    assert re.search(r"auto-patchelf could not satisfy dependency libssl\.so\.3 wanted by /nix/store/\S+"
                     r"/libexec/org\.example\.needs-ssl/bin/engine", bad.stderr), bad.stderr
    good = build(package("plain", None), tmp_path / "good")
    assert good.returncode == 0, good.stderr
    engine = (tmp_path / "good/libexec/org.example.plain/bin/engine").resolve()
    interp = subprocess.run([need("patchelf"), "--print-interpreter", str(engine)], capture_output=True, text=True)
    assert interp.stdout.strip() == subprocess.run([need("patchelf"), "--print-interpreter", "/bin/sh"],
                                                   capture_output=True, text=True).stdout.strip()
    rpath = subprocess.run([need("patchelf"), "--print-rpath", str(engine)], capture_output=True, text=True).stdout
    assert re.fullmatch(r"/\S+\n?", rpath) and "libstdc++" not in rpath, rpath
    ran = subprocess.run([str(tmp_path / "good/bin/engine")], capture_output=True, text=True, timeout=30)
    assert ran.stdout == "engine-ran\n", ran.stderr


def test_lemonpack_uses_the_flakes_own_typer_and_lightkube(tree, tmp_path):
    """Issue 26 point 1: typer 0.28 and lightkube (with lightkube-models) come from the flake's
    buildPythonPackage of the pinned files, not from the host: the packaged CLI imports them
    from their store paths, and `kube generate`'s typed models load."""
    out = nix("build", f"path:{tree}#lemonpack", "-o", str(tmp_path / "lp"), cwd=tree, timeout=900)
    assert out.returncode == 0, out.stderr
    script = (tmp_path / "lp/bin/lemonpack").read_text()
    paths = re.search(r"sys\.path\[0:0\] = (\[.*\])", script).group(1)
    probe = subprocess.run([script.splitlines()[0][2:].split()[0], "-I", "-c",
                            f"import sys; sys.path[0:0] = {paths}; import typer, lightkube.models.apps_v1 as a, "
                            "importlib.metadata as m; print(typer.__file__); print(a.__file__); "
                            "print(m.version('typer'), m.version('lightkube-models'))"],
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    typer_file, models_file, versions = probe.stdout.splitlines()
    assert re.match(r"/nix/store/[0-9a-z]{32}-python3-typer-0\.28\.0/", typer_file), typer_file
    assert re.match(r"/nix/store/[0-9a-z]{32}-python3-lightkube-1\.0\.1/", models_file), models_file
    pins = json.loads((REPO / "nix/python/pins.json").read_text())
    assert versions == f"{pins['typer']['version']} {pins['lightkube-models']['version']}"
    shutil.rmtree(tmp_path / "lp", ignore_errors=True)
