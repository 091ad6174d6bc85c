"""The offline stand-in (nix/offline-nixpkgs) fails where nixpkgs fails (issue 26 point 2).
One test per behaviour; each docstring names the nixpkgs file (and the commit of the version
read through the search tool, repository NixOS/nixpkgs) the expected behaviour is taken from.
The stand-in side is run here with the real nix; nixpkgs' side was only read."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from support.tools import need


needs_nix = pytest.mark.usefixtures("nix_installed")
REPO = Path(__file__).resolve().parents[2]
STAND_IN = REPO / "nix" / "offline-nixpkgs"
FLAGS = ["--option", "substituters", "", "--option", "connect-timeout", "1"]
SYSTEM = {"x86_64": "x86_64-linux", "aarch64": "aarch64-linux"}[os.uname().machine]


def pkgs(config: str = "{ }", system: str = SYSTEM) -> str:
    return f'(import {STAND_IN} {{ system = "{system}"; config = {config}; }})'


def evaluate(expr: str) -> subprocess.CompletedProcess:
    return subprocess.run(["nix-instantiate", "--eval", "--strict", "--json", "--expr", expr, *FLAGS],
                          capture_output=True, text=True, timeout=120)


def build(expr: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["nix-build", "--expr", expr, "-o", str(tmp_path / "result"), *FLAGS],
                          capture_output=True, text=True, timeout=300)


@needs_nix
def test_check_meta_refuses_a_package_not_for_the_host_platform():
    """pkgs/stdenv/generic/check-meta.nix (read at 1494b4592fd232b2ba6b376d32b1fa26071a7cf9):
    `checkPlatform` accepts a package whose `meta.platforms` (default: all) matches the host
    platform and whose `meta.badPlatforms` does not; otherwise `checkValidity` is invalid
    unless `config.allowUnsupportedSystem`, and `assertValidity` throws when the derivation is
    used ("refusing to evaluate"); the name and meta still evaluate (meta.available false)."""
    other = "aarch64-linux" if SYSTEM == "x86_64-linux" else "x86_64-linux"
    drv = 'p.stdenv.mkDerivation {{ name = "m"; dontUnpack = true; installPhase = "mkdir $out"; meta = {meta}; }}'
    for meta, ok in ((f'{{ platforms = [ "{other}" ]; }}', False), ("{ }", True),
                     (f'{{ platforms = [ "{SYSTEM}" ]; }}', True),
                     (f'{{ platforms = [ "{SYSTEM}" ]; badPlatforms = [ "{SYSTEM}" ]; }}', False)):
        expr = f"let p = {pkgs()}; d = {drv.format(meta=meta)}; in [ d.name d.meta.available ]"
        out = evaluate(expr)
        assert out.returncode == 0 and json.loads(out.stdout) == ["m", ok], (meta, out.stderr)
        out = evaluate(f"let p = {pkgs()}; in ({drv.format(meta=meta)}).drvPath")
        assert (out.returncode == 0) is ok, (meta, out.stderr)
        if not ok:
            assert "Package ‘m’ is not available on the requested hostPlatform" in out.stderr, out.stderr
    allowed = evaluate(f'let p = {pkgs("{ allowUnsupportedSystem = true; }")}; in '
                       f'({drv.format(meta=f"{{ platforms = [ {json.dumps(other)} ]; }}")}).drvPath')
    assert allowed.returncode == 0, allowed.stderr


@needs_nix
def test_check_meta_refuses_an_unfree_licence():
    """check-meta.nix (1494b459...): `hasDeniedUnfreeLicense` (a licence with free = false,
    without config.allowUnfree) makes the package invalid ("has an unfree license")."""
    drv = ('p.stdenv.mkDerivation { name = "u"; dontUnpack = true; installPhase = "mkdir $out"; '
           'meta.license = p.lib.licenses.unfree; }')
    out = evaluate(f"let p = {pkgs()}; in ({drv}).drvPath")
    assert out.returncode == 1 and "has an unfree license (‘unfree’)" in out.stderr, out.stderr
    assert evaluate(f'let p = {pkgs("{ allowUnfree = true; }")}; in ({drv}).drvPath').returncode == 0


@needs_nix
def test_outputs_are_attributes_of_the_result():
    """pkgs/stdenv/generic/make-derivation.nix and lib/customisation.nix (extendDerivation):
    `outputs = [ "out" "lib" ]` gives a derivation with both outputs, each an attribute of the
    result with its own outPath and `outputName`, the first being the default;
    meta.outputsToInstall defaults to the first output."""
    drv = ('p.stdenv.mkDerivation { name = "o"; outputs = [ "out" "lib" ]; dontUnpack = true; '
           'installPhase = "mkdir -p $out $lib"; }')
    out = evaluate(f"let p = {pkgs()}; d = {drv}; in "
                   "[ d.outputName d.lib.outputName (d.outPath == d.out.outPath) (d.lib.outPath != d.outPath) "
                   "d.meta.outputsToInstall d.lib.out.outputName ]")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["out", "lib", True, True, ["out"], "out"]


@pytest.mark.slow
@needs_nix
def test_outputs_move_to_output_and_missing_output_fails(tmp_path):
    """pkgs/build-support/setup-hooks/multiple-outputs.sh (moveToOutput; outputDev = dev when
    there is one) and Nix itself: an output the builder does not create fails the build."""
    ok = build(f'let p = {pkgs()}; d = p.stdenv.mkDerivation {{ name = "mv"; outputs = [ "out" "dev" ]; '
               'dontUnpack = true; installPhase = "mkdir -p $out/include $out/bin; echo h > $out/include/a.h; '
               'echo x > $out/bin/x; moveToOutput include \\"\\${!outputDev}\\""; }; in '
               'p.runCommand "both" { } "mkdir $out; cp -r ${d.dev} $out/dev; cp -r ${d} $out/out"', tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "result/dev/include/a.h").read_text() == "h\n"
    assert not (tmp_path / "result/out/include").exists() and (tmp_path / "result/out/bin/x").is_file()
    missing = build(f'let p = {pkgs()}; in p.stdenv.mkDerivation {{ name = "miss"; outputs = [ "out" "lib" ]; '
                    'dontUnpack = true; installPhase = "mkdir $out"; }', tmp_path / "m")
    assert missing.returncode != 0 and "lib" in missing.stderr, missing.stderr


def _tool(name: str, script: str = "#!/bin/sh\necho tool\n") -> str:
    """A package holding bin/NAME."""
    return (f'p.stdenv.mkDerivation {{ name = "{name}-pkg"; dontUnpack = true; installPhase = '
            f'"mkdir -p $out/bin; printf %s {json.dumps(script)[1:-1]!r} > $out/bin/{name}; chmod +x $out/bin/{name}"; }}')


@pytest.mark.slow
@needs_nix
def test_build_inputs_are_kept_apart_from_native_build_inputs(tmp_path):
    """pkgs/stdenv/generic/setup.sh (read at 183939da54831b11f389d9863a0e5b41aaf1ddc5):
    nativeBuildInputs are found with offsets (-1, 0), buildInputs with (0, 1); the derivation
    keeps both lists; `activatePackage` puts a package's bin/ on PATH only if strictDeps is
    unset or it is a build-time (offset -1) input, and a buildInputs entry's bin/ on HOST_PATH."""
    expr = (f'let p = {pkgs()}; nat = {_tool("nat")}; host = {_tool("host")}; mk = strict: p.stdenv.mkDerivation '
            '{ name = "apart"; dontUnpack = true; nativeBuildInputs = [ nat ]; buildInputs = [ host ]; '
            'strictDeps = strict; installPhase = "mkdir $out; echo $nativeBuildInputs > $out/native; '
            'echo $buildInputs > $out/build; (command -v host || echo none) > $out/path-host; '
            '(command -v nat || echo none) > $out/path-nat; echo $HOST_PATH > $out/host-path"; }; '
            'in p.runCommand "both" { } "mkdir $out; cp -r ${mk false} $out/lax; cp -r ${mk true} $out/strict"')
    out = build(expr, tmp_path)
    assert out.returncode == 0, out.stderr
    res = tmp_path / "result"
    for mode in ("lax", "strict"):
        native, host = (res / mode / "native").read_text().split(), (res / mode / "build").read_text().split()
        assert len(native) == 1 and native[0].endswith("-nat-pkg") and len(host) == 1 and host[0].endswith("-host-pkg")
        assert (res / mode / "path-nat").read_text().strip() == f"{native[0]}/bin/nat"
        assert (res / mode / "host-path").read_text().strip() == f"{host[0]}/bin"
    assert (res / "lax/path-host").read_text().strip().endswith("-host-pkg/bin/host")
    assert (res / "strict/path-host").read_text().strip() == "none"


@pytest.mark.slow
@needs_nix
def test_patch_shebangs_rewrites_to_host_path_programs(tmp_path):
    """pkgs/build-support/setup-hooks/patch-shebangs.sh (read at
    9147cb36dcb40ba45a15e27b3b510d08a09f2310): in the fixup phase every executable file of
    each output starting with "#!" gets its interpreter looked up on HOST_PATH (--host: the
    buildInputs' bin/); "/usr/bin/env NAME" becomes NAME's store path; an interpreter found
    nowhere is left as it is (so a script then relies on the user's PATH); `env -S` fails."""
    expr = (f'let p = {pkgs()}; tool = {_tool("mytool")}; in p.stdenv.mkDerivation {{ name = "sb"; dontUnpack = true; '
            'buildInputs = [ tool ]; installPhase = "mkdir -p $out/bin; '
            "printf '#!/usr/bin/env mytool --flag\\\\necho\\\\n' > $out/bin/a; "
            "printf '#!/usr/bin/env nosuchtool\\\\n' > $out/bin/b; "
            "printf '#!/bin/mytool\\\\n' > $out/bin/c; printf '#!/usr/bin/env mytool\\\\n' > $out/bin/noexec; "
            'chmod +x $out/bin/a $out/bin/b $out/bin/c"; }')
    out = build(expr, tmp_path)
    assert out.returncode == 0, out.stderr
    bin_ = tmp_path / "result/bin"
    first = {n: (bin_ / n).read_text().splitlines()[0] for n in ("a", "b", "c", "noexec")}
    assert first["a"].startswith("#!/nix/store/") and first["a"].endswith("-mytool-pkg/bin/mytool --flag"), first
    assert first["c"].startswith("#!/nix/store/") and first["c"].endswith("-mytool-pkg/bin/mytool"), first
    assert first["b"] == "#!/usr/bin/env nosuchtool" and first["noexec"] == "#!/usr/bin/env mytool"
    bad = build(f'let p = {pkgs()}; in p.stdenv.mkDerivation {{ name = "sbS"; dontUnpack = true; installPhase = '
                "\"mkdir -p $out/bin; printf '#!/usr/bin/env -S sh -e\\\\n' > $out/bin/s; chmod +x $out/bin/s\"; }",
                tmp_path / "bad")
    assert bad.returncode != 0 and "unsupported interpreter directive" in bad.stderr, bad.stderr


def _elf(tmp_path: Path, needed: list[str]) -> Path:
    src = tmp_path / "e.c"
    src.write_text("int main(void) { return 0; }\n")
    exe = tmp_path / "e"
    subprocess.run(["gcc", "-o", str(exe), str(src)], check=True, timeout=60)
    patchelf = need("patchelf")
    subprocess.run([patchelf, "--set-interpreter", "/nix/store/nothing-here/ld.so", str(exe)], check=True)
    for lib in needed:
        subprocess.run([patchelf, "--add-needed", lib, str(exe)], check=True)
    return exe


@pytest.mark.slow
@needs_nix
def test_auto_patchelf_sets_the_interpreter_and_fails_on_an_unresolved_needed(tmp_path):
    """pkgs/build-support/setup-hooks/auto-patchelf.sh (read at
    a2ff8c71b155be2e4662ded9cd92f08d0c848598: the lib/ of dependencies gathered by an
    environment hook, autoPatchelf over every output in postFixup) and auto-patchelf.py (read
    at 7be6a57b23f82c1e3e1d55fbbeddd2dad365706d): a dynamic executable gets the C library's
    loader as interpreter; each NEEDED library outside libc is looked up among the outputs'
    and the gathered directories' shared objects and its directory put into RUNPATH; one found
    nowhere is reported ("auto-patchelf could not satisfy dependency X wanted by F") and fails
    the build, unless listed in autoPatchelfIgnoreMissingDeps."""
    exe = _elf(tmp_path, ["libfoo.so.1"])
    libdir = tmp_path / "foo"
    libdir.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(libdir / "libfoo.so.1"), "-x", "c", "/dev/null"],
                   check=True, timeout=60)
    def pkg(inputs: str, extra: str = "") -> str:
        return (f'let p = {pkgs()}; foo = p.stdenv.mkDerivation {{ name = "foo"; dontUnpack = true; '
                f'installPhase = "mkdir -p $out/lib; cp ${{{libdir}/libfoo.so.1}} $out/lib/libfoo.so.1"; }}; in '
                f'p.stdenv.mkDerivation {{ name = "ap"; dontUnpack = true; nativeBuildInputs = [ p.autoPatchelfHook ]; '
                f'{inputs} {extra} installPhase = "mkdir -p $out/bin; cp ${{{exe}}} $out/bin/e; chmod +x $out/bin/e"; }}')
    missing = build(pkg(""), tmp_path / "missing")
    assert missing.returncode != 0
    assert "error: auto-patchelf could not satisfy dependency libfoo.so.1 wanted by /nix/store/" in missing.stderr
    assert "auto-patchelf failed to find all the required dependencies." in missing.stderr, missing.stderr
    ignored = build(pkg("", 'autoPatchelfIgnoreMissingDeps = [ "libfoo.so.1" ];'), tmp_path / "ign")
    assert ignored.returncode == 0, ignored.stderr
    found = build(pkg("buildInputs = [ foo ];"), tmp_path / "found")
    assert found.returncode == 0, found.stderr
    out = (tmp_path / "found/result/bin/e").resolve()
    patchelf = need("patchelf")
    interp = subprocess.run([patchelf, "--print-interpreter", str(out)], capture_output=True, text=True).stdout.strip()
    assert interp == subprocess.run([patchelf, "--print-interpreter", "/bin/sh"], capture_output=True,
                                    text=True).stdout.strip()
    rpath = subprocess.run([patchelf, "--print-rpath", str(out)], capture_output=True, text=True).stdout.strip()
    assert rpath.startswith("/nix/store/") and rpath.endswith("-foo/lib"), rpath
    assert subprocess.run([str(out)], timeout=30).returncode == 0


@pytest.mark.slow
@needs_nix
def test_fetch_pypi_is_fixed_output_by_hash():
    """pkgs/build-support/fetchpypi/default.nix (read at 6b636feba458b3857821ca206eb31822390dcc28):
    a source distribution's URL is mirror://pypi/<first letter>/<pname>/<pname>-<version>.tar.gz,
    a wheel's https://files.pythonhosted.org/packages/<dist>/<first letter>/<pname>/
    <pname>-<version>-<python>-<abi>-<platform>.whl, fetched by fetchurl with the hash: a
    fixed-output path, the same as `nix-store --add-fixed sha256` of the file (so nothing is
    fetched when the file was added)."""
    from support.nixpins import add_pins_to_store, pins

    added = add_pins_to_store()
    for name, pin in sorted(pins().items()):
        args = " ".join(f"{k} = {json.dumps(v)};" for k, v in pin.items() if k != "file")
        out = evaluate(f"let p = {pkgs()}; f = p.python3Packages.fetchPypi {{ {args} }}; in [ f.outPath f.url ]")
        assert out.returncode == 0, out.stderr
        path, url = json.loads(out.stdout)
        assert path in added, (name, path, added)
        first = pin["pname"][0]
        if pin["format"] == "wheel":
            assert url == (f"https://files.pythonhosted.org/packages/{pin['dist']}/{first}/{pin['pname']}/"
                           f"{pin['file']}")
        else:
            assert url == f"https://files.pythonhosted.org/packages/source/{first}/{pin['pname']}/{pin['file']}"
    # another hash is another path: the added file does not stand for it
    wrong = evaluate(f'let p = {pkgs()}; in (p.python3Packages.fetchPypi {{ pname = "typer"; version = "0.28.0"; '
                     'hash = "sha256-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="; }).outPath')
    assert wrong.returncode == 0 and json.loads(wrong.stdout) not in added, wrong.stderr
