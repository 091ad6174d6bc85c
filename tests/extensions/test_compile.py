"""The generated registry is compiled (seed 002 section 5): ``compile_gufo`` / ``lemonpack
extensions build`` compile the shipped API headers, the generated registry and constants
header and the official stub sources with the real g++, and ``bin/gufo-registry`` prints
what registered, in registry order, with availability and reasons; the probes are code."""

from __future__ import annotations

import fnmatch
import json
import subprocess
import tomllib

import pytest

from lemonpack.extensions.compile import CXX_DIR, CompileError, compile_gufo
from lemonpack.extensions.generate import facts
from lemonpack.extensions.pipeline import run_pipeline
from support.extensions import REPO, manifest, write_extension
from lemonpack.cli import main

CPU = frozenset({"linux"})
HIP = frozenset({"linux", "hip"})


def run_cli(capsys, *args):
    """``(exit code, stdout, stderr)`` of the lemonpack CLI."""
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def registry_json(built) -> list[dict]:
    return json.loads(subprocess.run([str(built.bin), "--json"], check=True, capture_output=True, text=True).stdout)


def expected(sel) -> list[dict]:
    """What gufo-registry --json must print: the generated extensions.json's providers."""
    return [{"extension": e["name"], "provider": p["id"], "capability": p["capability"], "keys": p["keys"],
             "available": p["available"], "reason": p["reason"]}
            for e in facts(sel)["extensions"] for p in e["providers"]]


def test_shipped_cxx_is_package_data():
    """An installed lemonpack has the headers and gufo-registry's source: pyproject's
    package-data patterns cover every file under lemonpack/extensions/cxx."""
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "lemonpack.extensions"]
    base = REPO / "lemonpack" / "extensions"
    shipped = [p.relative_to(base).as_posix() for p in CXX_DIR.rglob("*") if p.is_file()]
    assert {"cxx/include/gufo/ext/registry.hpp", "cxx/gufo-registry/main.cpp"} <= set(shipped)
    assert [f for f in shipped if not any(fnmatch.fnmatch(f, pat) for pat in patterns)] == []
    assert (REPO / "include" / "gufo" / "ext" / "registry.hpp").read_bytes() == (
        CXX_DIR / "include" / "gufo" / "ext" / "registry.hpp").read_bytes()


def test_translation_units_are_the_listed_sources_else_the_top_level_ones(tmp_path):
    from lemonpack.extensions.compile import translation_units
    from lemonpack.extensions.manifest import load_manifest

    doc = manifest("tu")
    d = write_extension(tmp_path / "tu", doc)
    (d / "provider.cpp").write_text("// p\n")
    (d / "kernel.hpp").write_text("// h\n")
    assert translation_units(load_manifest(d)) == ["extension.cpp"]
    doc["files"] = ["kernel.hpp"]
    (d / "extension.json").write_text(json.dumps(doc))
    (d / "sub").mkdir()
    (d / "sub" / "deep.cpp").write_text("// not at the top\n")
    assert translation_units(load_manifest(d)) == ["extension.cpp", "provider.cpp"]


@pytest.mark.slow
def test_cli_build_of_the_release_lock_lists_every_official_provider(tree, tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, err = run_cli(capsys, "extensions", "build", "--tree", str(tree), "--feature", "linux",
                                "--out", str(out), "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["bin"] == str(out / "bin" / "gufo-registry") and doc["lib"] == str(out / "lib" / "libgufo-ext.a")
    assert (out / "include" / "gufo" / "ext" / "registry.hpp").is_file()
    assert (out / "include" / "gufo_ext_constants.hpp").is_file()
    sel = run_pipeline(tree, features=CPU, environ={})
    got = registry_json(type("B", (), {"bin": out / "bin" / "gufo-registry"}))
    assert got == expected(sel)
    assert [(p["provider"], p["available"]) for p in got] == [
        ("deepseek4", False), ("gemma2-embed-hip", False), ("gemma2-embed-cpu", True), ("minimax-h3", False),
        ("qwen27-q4", False), ("qwen27-cpu", True), ("qwen-guard", True), ("qwen3-asr", False), ("qwen3-tts", False),
        ("qwen3-tts-cpu", True), ("flash-next-q4", False), ("qwen-image-21", False)]
    assert got[0]["reason"] == "target gufo_deepseek_v4_flash_hip not built: needs hip"
    text = subprocess.run([str(out / "bin" / "gufo-registry")], check=True, capture_output=True, text=True).stdout
    assert text.splitlines()[0] == f"extension API {sel.api_version}"
    assert "extension qwen38_flash_next 1.0.0\n  option --mtp-model\n  option --mtp-draft-tokens\n" in text
    # ar D: no timestamps, uids or modes in the archive members
    members = subprocess.run(["ar", "tv", str(out / "lib" / "libgufo-ext.a")], check=True, capture_output=True,
                             text=True).stdout.splitlines()
    assert members[0].split()[-1] == "gufo_ext_registry.o" and all(" 0/0 " in m for m in members)
    assert all("1970" in m for m in members)


@pytest.mark.slow
def test_probes_are_code_and_the_first_yes_wins(tree, tmp_path):
    """A HIP build with a community GSQ provider after the official ones: its compiled probe
    serves GSQ files, the official Q4 probe keeps Q4_K_M files, nothing else says yes."""
    gsq = manifest("flash_next_gsq", keys=["gguf:qwen4exp.gsq2"], requires=("hip",), arch="qwen4exp")
    probe = ('namespace { bool gsq_probe(const gufo::ext::ArtifactIdentity &a) {\n'
             '  return a.architecture == "qwen4exp" && a.has("gsq.group_size", "32"); } }\n')
    d = write_extension(tmp_path / "c" / "gsq", gsq, extra_source=probe)
    src = (d / "extension.cpp").read_text()
    (d / "extension.cpp").write_text(src.replace("_keys);", "_keys, gsq_probe);"))
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select="all", features=HIP, environ={})
    built = compile_gufo(sel, tmp_path / "out")
    got = registry_json(built)
    assert got == expected(sel) and all(p["available"] for p in got)
    assert got[-1] == {"extension": "flash_next_gsq", "provider": "flash-next-gsq-p", "capability": "text_generation",
                       "keys": ["gguf:qwen4exp.gsq2"], "available": True, "reason": None}

    def pick(*args):
        return subprocess.run([str(built.bin), "--pick", "text_generation", "--architecture", *args],
                              capture_output=True, text=True)
    q4 = pick("qwen4exp", "--meta", "qwen4exp.expert_count=64", "--tensor", "blk.0.ffn_gate_exps.weight=Q4_K")
    assert (q4.returncode, q4.stdout) == (0, "qwen38_flash_next flash-next-q4\n")
    g = pick("qwen4exp", "--meta", "qwen4exp.expert_count=64", "--tensor", "blk.0.ffn_gate_exps.weight=Q4_0",
             "--meta", "gsq.group_size=32")
    assert (g.returncode, g.stdout) == (0, "flash_next_gsq flash-next-gsq-p\n")
    none = pick("llama")
    assert (none.returncode, none.stdout) == (1, "No text provider found for model architecture 'llama'\n")


@pytest.mark.slow
def test_same_inputs_give_the_same_bytes_and_generated_dirs_compile_too(tree, tmp_path, capsys):
    sel = run_pipeline(tree, select=["qwen"], features=CPU, environ={})
    a = compile_gufo(sel, tmp_path / "a" / "out", jobs=2)
    gen = tmp_path / "gen"
    code, _, err = run_cli(capsys, "extensions", "generate", "--tree", str(tree), "--select", "qwen",
                           "--feature", "linux", "--out", str(gen))
    assert code == 0, err
    b = compile_gufo(gen, tmp_path / "elsewhere" / "b", jobs=1, extension_dirs=[tree / "catalogue/extensions/qwen"])
    for rel in ("bin/gufo-registry", "lib/libgufo-ext.a", "include/gufo_ext_constants.hpp",
                "include/gufo/ext/registry.hpp", "share/gufo/gufo_ext_registry.cpp"):
        assert (a.root / rel).read_bytes() == (b.root / rel).read_bytes(), rel
    assert str(tmp_path).encode() not in a.bin.read_bytes() and str(tmp_path).encode() not in a.lib.read_bytes()
    with pytest.raises(CompileError, match="selects qwen, but no extension directory given holds it"):
        compile_gufo(gen, tmp_path / "c", extension_dirs=[])


@pytest.mark.slow
def test_a_source_that_does_not_compile_is_named_and_out_is_kept(tree, tmp_path, capsys):
    d = write_extension(tmp_path / "c" / "broken", manifest("broken"), extra_source="int broken = ;\n")
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select=["broken"], features=CPU, environ={})
    out = tmp_path / "out"
    (out / "bin").mkdir(parents=True)
    (out / "bin" / "gufo-registry").write_text("old build\n")
    with pytest.raises(CompileError, match=rf"^{d / 'extension.cpp'}: does not compile \(g\+\+ exit 1\): .*error"):
        compile_gufo(sel, out)
    assert [p.name for p in out.iterdir()] == ["bin"] and (out / "bin" / "gufo-registry").read_text() == "old build\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []
    (out / "notes.txt").write_text("mine\n")
    with pytest.raises(CompileError, match="holds 'notes.txt', which a build did not write"):
        compile_gufo(sel, out)
    code, _, err = run_cli(capsys, "extensions", "build", "--tree", str(tree), "--extension-dir", str(tmp_path / "c"),
                           "--select", "broken", "--feature", "linux", "--out", str(out), "--cxx", "no-such-c++")
    # the missing compiler is met first by the include check, which needs it too
    assert code == 1 and "cannot check the include allowlist: the C++ compiler 'no-such-c++' is not on PATH" in err
    code, _, err = run_cli(capsys, "extensions", "build", "--tree", str(tree), "--select", "lock", "--feature", "linux",
                           "--out", str(tmp_path / "lock-out"), "--cxx", "no-such-c++")  # official only: the compile's own
    assert code == 1 and "'no-such-c++' not found on PATH" in err


@pytest.mark.slow
def test_cross_compiled_for_arm64_with_the_same_rules(tree, tmp_path):
    """Issue 29: gufo for arm64 on this x86-64 machine is compiled by Debian's
    aarch64-linux-gnu-g++ with the same flags: AArch64 machine code, byte-identical from two
    directories, and it prints the same registry as the host build when run through
    qemu-user-static (with the cross toolchain's libraries as its root)."""
    import shutil

    from lemonpack.exe_header import read_executable
    from lemonpack.extensions.compile import toolchain

    if shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.fail("aarch64-linux-gnu-g++ is not installed: apt-get install -y g++-aarch64-linux-gnu")
    assert toolchain("arm64") == ("aarch64-linux-gnu-g++", "aarch64-linux-gnu-ar")
    sel = run_pipeline(tree, select="lock", features=CPU, environ={})
    a = compile_gufo(sel, tmp_path / "a" / "out", cpu_arch="arm64")
    b = compile_gufo(sel, tmp_path / "elsewhere" / "b", cpu_arch="arm64", jobs=1)
    assert read_executable(a.bin).archs == {"arm64"}
    for rel in ("bin/gufo-registry", "lib/libgufo-ext.a"):
        assert (a.root / rel).read_bytes() == (b.root / rel).read_bytes(), rel
    host = compile_gufo(sel, tmp_path / "host", cpu_arch="amd64")
    assert read_executable(host.bin).archs == {"amd64"}
    ran = subprocess.run(["qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu", str(a.bin), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == registry_json(host) == expected(sel)
    with pytest.raises(CompileError, match="no cross compiler for s390x"):
        compile_gufo(sel, tmp_path / "s390x", cpu_arch="s390x")


@pytest.mark.slow
def test_cli_build_for_arm64(tree, tmp_path, capsys):
    from lemonpack.exe_header import read_executable

    code, out, err = run_cli(capsys, "extensions", "build", "--tree", str(tree), "--select", "qwen", "--feature",
                             "linux", "--cpu-arch", "arm64", "--out", str(tmp_path / "arm"), "--json")
    assert code == 0, err
    assert read_executable(json.loads(out)["bin"]).archs == {"arm64"}
