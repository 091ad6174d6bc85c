"""The generated registry is real C++: compile it with the system g++ against include/ (the
stub core), the official stub sources of the built targets and a tiny main, run it, and
check the provider order and the unavailable reasons it prints."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from lemonpack.extensions.generate import generate
from lemonpack.extensions.pipeline import run_pipeline
from support.extensions import manifest, write_extension

MAIN = r'''#include <cstdio>
#include "gufo/ext/registry.hpp"
int main() {
  gufo::ext::Registry registry;
  gufo_ext_register_all(registry);
  for (const auto &e : registry.events()) {
    std::printf("%s %s %s", e.kind.c_str(), e.id.c_str(), e.detail.c_str());
    for (const auto &k : e.keys) std::printf(" %s", k.c_str());
    std::printf("\n");
  }
}
'''


def _build_and_run(tree, tmp_path, sel) -> list[str]:
    gpp = shutil.which("g++")
    assert gpp, "g++ is required for the extension compile tests"
    out = tmp_path / "gen"
    out.mkdir()
    for name, data in generate(sel).items():
        (out / name).write_bytes(data)
    (out / "main.cpp").write_text(MAIN)
    sources = [str(out / "main.cpp"), str(out / "gufo_ext_registry.cpp")]
    for ext in sel.extensions:  # what a build compiles: the extension entry + sources of built targets
        sources.append(str(ext.path / "extension.cpp"))
        for f in ext.files:
            if f.startswith("provider_") and any(s.available and s.provider.target.endswith(f[len("provider_"):-4])
                                                 for s in sel.providers if s.extension is ext):
                sources.append(str(ext.path / f))
    exe = tmp_path / "registry"
    subprocess.run([gpp, "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{tree / 'include'}", f"-I{out}",
                    "-o", str(exe), *sources], check=True, capture_output=True, text=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()


@pytest.mark.slow
def test_cpu_only_build_lists_gpu_providers_as_unavailable(tree, tmp_path):
    sel = run_pipeline(tree, features=frozenset({"linux"}), environ={})
    lines = _build_and_run(tree, tmp_path, sel)
    assert [l.split()[1] for l in lines if l.startswith("extension ")] == [e.name for e in sel.extensions]
    provider_lines = [l for l in lines if l.startswith(("provider ", "unavailable "))]
    assert provider_lines == [
        "unavailable deepseek4 target gufo_deepseek_v4_flash_hip not built: needs hip",
        "unavailable gemma2-embed-hip target gufo_embedding_gemma2_hip not built: needs hip",
        "provider gemma2-embed-cpu embeddings gguf:gemma-embedding",
        "unavailable minimax-h3 target gufo_minimax_h3_hip not built: needs hip",
        "unavailable qwen27-q4 target gufo_qwen_hip not built: needs hip",
        "provider qwen27-cpu text_generation gguf:qwen27",
        "provider qwen-guard decisions gguf:qwen27guard",
        "unavailable qwen3-asr target gufo_qwen3_asr_hip not built: needs hip",
        "unavailable qwen3-tts target gufo_qwen3_tts_hip not built: needs hip",
        "provider qwen3-tts-cpu speech_synthesis gguf:qwen3tts",
        "unavailable flash-next-q4 target gufo_qwen38_flash_next_hip not built: needs hip",
        "unavailable qwen-image-21 target gufo_qwen_image_21_hip not built: needs hip",
    ]
    assert "option --speculative " in lines  # the stub reads the option from the generated constants


@pytest.mark.slow
def test_hip_build_with_a_community_extension(tree, tmp_path):
    write_extension(tmp_path / "c" / "gsq", manifest("flash_next_gsq", keys=["gguf:qwen4exp-gsq"],
                                                    requires=("hip",)))
    sel = run_pipeline(tree, extra_dirs=[tmp_path / "c"], select="all", features=frozenset({"linux", "hip"}),
                       environ={})
    lines = _build_and_run(tree, tmp_path, sel)
    assert not any(l.startswith("unavailable") for l in lines)
    assert [l.split()[1] for l in lines if l.startswith("provider ")] == [
        "deepseek4", "gemma2-embed-hip", "gemma2-embed-cpu", "minimax-h3", "qwen27-q4", "qwen27-cpu", "qwen-guard",
        "qwen3-asr", "qwen3-tts", "qwen3-tts-cpu", "flash-next-q4", "qwen-image-21", "flash-next-gsq-p"]
    assert lines[-1] == "provider flash-next-gsq-p text_generation gguf:qwen4exp-gsq"
