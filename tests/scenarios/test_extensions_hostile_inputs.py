"""Extensions and model files built to slip past or exhaust the checks (shared/cases 42 to 45):
sources behind a symlinked directory, a 1,000-link dependency chain, a GGUF header declaring
1.5 million tensors, and a quantized community variant of an official model."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest

from lemonpack.cli import main
from lemonpack.extensions.includes import IncludeCheck, tree_problems
from lemonpack.extensions.pipeline import ExtensionError, run_pipeline
from lemonpack.gguf_header import MAX_TENSORS, ModelFileError, read_identity
from support.extensions import REPO, manifest, write_extension
from support.gguf_files import GGMLQuantizationType, write_gguf

CPU = frozenset({"linux"})
PRIVATE = '#include <sys/mman.h>\n#include <dlfcn.h>\nint impl;\n'


def include_problems(d):
    """The compiler's include check of the extension directory ``d``."""
    from lemonpack.extensions.manifest import load_manifest

    with IncludeCheck() as check:
        return check.include_problems(load_manifest(d))


def run(capsys, *args):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


# ---------------------------------------------------------------- sources behind symlinks

def test_symlinks_leaving_the_extension_are_refused_and_sources_are_scanned_where_they_are(tree, tmp_path, capsys):
    private = tmp_path / "private"
    private.mkdir()
    (private / "kernel.cpp").write_text(PRIVATE)
    d = write_extension(tmp_path / "exts" / "symimpl", manifest("symimpl"))
    (d / "impl").symlink_to(private)                     # absolute, outside
    (d / "sys").symlink_to("/etc")
    (d / "rel").symlink_to(os.path.join("..", "..", "private"))   # relative, still outside
    code, out, _ = run(capsys, "extensions", "check", "--tree", tree, "--extension-dir", tmp_path / "exts",
                       "--select", "all", "--feature", "linux")
    assert code == 1
    lines = out.splitlines()
    assert any(l.endswith(f"{d / 'impl'}: symlink to absolute path '{private}': a symlink in an extension must stay "
                          "inside its directory (its sources are compiled, so they must be scanned)") for l in lines)
    assert any(f"{d / 'sys'}: symlink to absolute path '/etc'" in l for l in lines)
    assert any(f"{d / 'rel'}: " in l and "leaves" in l or f"{d / 'rel'}: " in l and "outside" in l for l in lines), out
    assert not any("/etc/" in l for l in lines)  # what lies outside is never read

    # the same sources as real files, which extension.cpp includes: the include allowlist names them
    for link in ("impl", "sys", "rel"):
        (d / link).unlink()
    (d / "impl").mkdir()
    (d / "impl" / "kernel.cpp").write_text(PRIVATE)
    write_extension(d, manifest("symimpl"), extra_source='#include "impl/kernel.cpp"\n')
    assert [r.split(": #include")[0] for r in include_problems(d)] == [f"{d / 'impl' / 'kernel.cpp'}:1",
                                                                       f"{d / 'impl' / 'kernel.cpp'}:2"]
    assert all(r.endswith(f"(included from {d / 'extension.cpp'}:3)") for r in include_problems(d))
    # a symlink that stays inside is fine, and what the compiler reads through it is judged
    (d / "alias").symlink_to("impl")
    write_extension(d, manifest("symimpl"), extra_source='#include "alias/kernel.cpp"\n')
    assert tree_problems(d) == []
    assert [r.split(": #include")[0] for r in include_problems(d)] == [f"{d / 'alias' / 'kernel.cpp'}:1",
                                                                       f"{d / 'alias' / 'kernel.cpp'}:2"]


def test_a_source_that_is_not_a_regular_file_is_a_reason_not_a_hang(tmp_path):
    d = write_extension(tmp_path / "fifo", manifest("fifo"))
    os.mkfifo(d / "pipe.h")
    (problem,) = tree_problems(d)
    assert problem.startswith(f"{d / 'pipe.h'}: not a regular file or directory (a fifo, socket or device)")


# ---------------------------------------------------------------- long dependency chains

def _chain(root, n, last_dependency=None):
    for i in range(n):
        name = f"rc_{i:04d}"
        doc = manifest(name)
        doc["dependencies"] = [f"rc_{i + 1:04d}"] if i < n - 1 else ([last_dependency] if last_dependency else [])
        d = root / name
        d.mkdir(parents=True)
        (d / "extension.json").write_text(json.dumps(doc))
        (d / "extension.cpp").write_text(f'namespace gufo::ext {{ class Registry; }}\n'
                                         f'extern "C" void {name}_register(gufo::ext::Registry &) {{}}\n'
                                         f'extern "C" void {name}_provider_register(gufo::ext::Registry &) {{}}\n')


def test_a_thousand_link_dependency_chain_is_selected_without_recursion(tree, tmp_path):
    _chain(tmp_path / "c", 1000)
    assert sys.getrecursionlimit() < 2000  # the old recursive walk needed two frames per link
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select=["rc_0000"], features=CPU, environ={},
                       includes=False)  # the selection's walk is the subject; the compiler's check is below
    assert [e.name for e in sel.extensions][-1000:] == [f"rc_{i:04d}" for i in range(1000)]


@pytest.mark.slow  # the include check preprocesses 1,000 translation units (about 15 s on 2 cores)
def test_a_thousand_link_dependency_chain_through_the_cli(tree, tmp_path, capsys):
    _chain(tmp_path / "c", 1000)
    code, out, err = run(capsys, "extensions", "check", "--tree", tree, "--extension-dir", tmp_path / "c",
                         "--select", "all", "--feature", "linux")
    assert code == 0 and "Traceback" not in err and out.startswith("extensions: ok (1003 selected")  # + the 3 official ones with a cpu target


@pytest.mark.parametrize("end, message", [
    ("rc_0200", "dependency cycle: rc_0200 -> rc_0201 -> "),
    ("gone", "missing dependency rc_0000 -> rc_0001 -> "),
])
def test_a_broken_end_of_a_long_chain_is_named(tree, tmp_path, end, message):
    _chain(tmp_path / "c", 400, last_dependency=end)
    with pytest.raises(ExtensionError) as e:
        run_pipeline(tree, extra_dirs=[tmp_path / "c"], select=["rc_0000"], features=CPU, environ={},
                     includes=False)
    text = str(e.value)
    assert text.startswith(f"cannot select rc_0000: {message}") and "\n" not in text
    assert text.endswith(f"rc_0399 -> {end}" + ("" if end != "gone" else ": no extension named 'gone'"))


# ---------------------------------------------------------------- GGUF headers declaring too much

def _declared(path, n_tensors, write=None):
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    write = n_tensors if write is None else write
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<I", 3) + struct.pack("<QQ", n_tensors, 1))
        f.write(s("general.architecture") + struct.pack("<I", 8) + s("qwen27"))
        f.write(b"".join(s(f"t{i}") + struct.pack("<IQIQ", 1, 4, 0, 0) for i in range(write)))
    return path


def _max_rss_kb(path) -> tuple[int, str]:
    """Peak RSS (KiB) of a fresh interpreter reading ``path``, and what it printed. The peak
    is the new process image's own (``VmHWM``): ``ru_maxrss`` survives ``execve`` on Linux and
    would report the forking pytest's size."""
    code = ("import sys\nfrom lemonpack.gguf_header import read_identity, ModelFileError\n"
            "try:\n    print(len(read_identity(sys.argv[1]).tensors))\n"
            "except ModelFileError as e:\n    print(e)\n"
            "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))\n")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    said, rss = r.stdout.strip().splitlines()
    return int(rss), said


def test_a_header_declaring_millions_of_tensors_is_refused_in_bounded_memory(tmp_path):
    path = _declared(tmp_path / "many.gguf", 1_500_000, write=1000)
    with pytest.raises(ModelFileError, match=rf"^{path}: the header declares 1500000 tensors; at most {MAX_TENSORS} "
                                             "are read"):
        read_identity(path)
    big = _declared(tmp_path / "at-cap.gguf", MAX_TENSORS)
    rss_cap, said = _max_rss_kb(big)
    assert said == str(MAX_TENSORS)
    over = _declared(tmp_path / "over.gguf", 4 * MAX_TENSORS)
    rss_over, said = _max_rss_kb(over)
    assert "at most" in said
    assert rss_cap < 256 * 1024 and rss_over < 256 * 1024, (rss_cap, rss_over)


# ---------------------------------------------------------------- a quantized variant of an official model

GSQ = {"name": "flash_next_gsq", "version": "0.9.0", "api_version": ">= 0.1.0", "entry": "flash_next_gsq_register",
       "providers": [{"id": "flash-next-gsq2", "capability": "text_generation", "keys": ["gguf:qwen4exp.gsq2"],
                      "target": "gufo_flash_next_gsq_hip", "entry": "flash_next_gsq_provider_register",
                      "probe": {"format": "gguf", "architecture": ["qwen4exp"],
                                "metadata": {"qwen4exp.expert_count": 64, "gsq.group_size": 32}}}],
       "targets": [{"name": "gufo_flash_next_gsq_hip", "requires": ["hip"]}], "dependencies": ["qwen38_flash_next"]}


def test_a_quantized_community_variant_serves_its_files(tree, tmp_path, capsys):
    ext = tmp_path / "exts" / "flash_next_gsq"
    ext.mkdir(parents=True)
    (ext / "extension.json").write_text(json.dumps(GSQ))
    (ext / "extension.cpp").write_text('#include "gufo/ext/registry.hpp"\n'
                                       'extern "C" void flash_next_gsq_register(gufo::ext::Registry &) {}\n'
                                       'extern "C" void flash_next_gsq_provider_register(gufo::ext::Registry &) {}\n')
    experts = {"blk.0.ffn_gate_exps.weight": [2048, 768, 64]}
    gsq = write_gguf(tmp_path / "gsq.gguf", "qwen4exp", {"qwen4exp.expert_count": 64, "gsq.group_size": 32,
                                                         "general.file_type": 2},
                     experts, with_data=False, types={"blk.0.ffn_gate_exps.weight": GGMLQuantizationType.Q4_0})
    q4 = write_gguf(tmp_path / "q4.gguf", "qwen4exp", {"qwen4exp.expert_count": 64, "general.file_type": 15},
                    experts, with_data=False, types={"blk.0.ffn_gate_exps.weight": GGMLQuantizationType.Q4_K})
    args = ["--tree", tree, "--extension-dir", tmp_path / "exts", "--select", "all", "--feature", "linux",
            "--feature", "hip"]
    code, out, err = run(capsys, "probe", gsq, *args)
    assert code == 0, err
    assert "decision: flash-next-gsq2 (flash_next_gsq)" in out
    assert ("  4. flash-next-q4 (qwen38_flash_next): no\n" in out
            and "tensor blk.0.ffn_gate_exps.weight has type Q4_0, not one of [Q4_K, Q6_K]" in out)
    code, out, _ = run(capsys, "probe", q4, *args)
    assert code == 0 and "decision: flash-next-q4 (qwen38_flash_next)" in out
    assert "flash-next-gsq2 (flash_next_gsq): no" in out  # no gsq.group_size
