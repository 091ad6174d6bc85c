"""Memory estimates (lemonpack/runtime/models/memory.py): GGUF tensors + KV cache, else size on disk."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFWriter

from lemonpack.errors import LemonpackError
from lemonpack.runtime.models.memory import estimate_model


def _gguf(path, n_layer=2, n_embd=64, n_head=8, n_head_kv=2):
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(n_layer)
    w.add_embedding_length(n_embd)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_tensor("tok_embd.weight", np.zeros((100, n_embd), dtype=np.float32))  # 25,600 B
    w.add_tensor("out.weight", np.zeros((n_embd,), dtype=np.float16))  # 128 B
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def test_gguf_is_tensor_bytes_plus_llama_cpp_kv_cache(tmp_path):
    p = tmp_path / "m.gguf"
    _gguf(p)
    e = estimate_model(str(p), ctx_size=1024)
    assert e.weights == 100 * 64 * 4 + 64 * 2
    # 2 (K and V) x n_layer x n_ctx x n_embd_k_gqa (64/8 * 2 heads) x 2 bytes (f16)
    assert e.kv == 2 * 2 * 1024 * 16 * 2
    assert estimate_model(str(p), ctx_size=2048).kv == 2 * e.kv
    assert estimate_model(str(p), 1024, "q8_0", "q8_0").kv == int(2 * 2 * 1024 * 16 * 34 / 32)


def test_per_layer_counts_count_their_largest_and_a_header_only_file_is_estimated(tmp_path):
    """The one GGUF reader (lemonpack.gguf_header) reads a per-layer array whole; a file whose
    tensor data is absent (a partial download) is estimated from its header."""
    p = tmp_path / "layers.gguf"
    w = GGUFWriter(str(p), "llama")
    w.add_block_count(3)
    w.add_embedding_length(64)
    w.add_head_count(8)
    w.add_array("llama.attention.head_count_kv", [2, 4, 1])
    w.add_tensor("out.weight", np.zeros((64,), dtype=np.float16))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    e = estimate_model(str(p), ctx_size=1024)
    assert (e.weights, e.kv) == (128, 2 * 3 * 1024 * (8 * 4) * 2)
    head = tmp_path / "head.gguf"
    data = p.read_bytes()
    head.write_bytes(data[:len(data) - 128])  # the tensor data cut off
    assert estimate_model(str(head), ctx_size=1024) == e


def test_other_files_are_their_size_on_disk(tmp_path):
    (tmp_path / "m.safetensors").write_bytes(b"x" * 1000)
    assert estimate_model(str(tmp_path / "m.safetensors")).total == 1000
    (tmp_path / "bad.gguf").write_bytes(b"GGUF fake")
    assert estimate_model(str(tmp_path / "bad.gguf")).total == 9
    with pytest.raises(LemonpackError):
        estimate_model(str(tmp_path / "missing"))




# -- the engine's floor


def test_engine_floor_is_the_recipe_field_else_the_builtin_table_else_0():
    import copy

    from support.recipes import PASSTHROUGH, VARIANT, load_doc

    from lemonpack.runtime.models.memory import ENGINE_FLOORS, FLOOR_KEY, engine_floor

    assert engine_floor(None) == 0
    assert engine_floor(load_doc(PASSTHROUGH)) == 0  # not a built-in, no field
    assert engine_floor(load_doc(VARIANT)) == ENGINE_FLOORS["llamacpp"] > 16 << 20  # variant_of llamacpp
    doc = copy.deepcopy(VARIANT)
    doc["extensions"] = {FLOOR_KEY: 123456}
    assert engine_floor(load_doc(doc)) == 123456  # the recipe says better
    doc["extensions"] = {FLOOR_KEY: 0}
    assert engine_floor(load_doc(doc)) == 0


@pytest.mark.parametrize("bad", [-1, 1.5, "24MiB", True, None])
def test_a_bad_engine_floor_names_the_file_and_key(bad):
    import copy

    from support.recipes import PASSTHROUGH, load_doc

    from lemonpack.runtime.models.memory import FLOOR_KEY, engine_floor

    doc = copy.deepcopy(PASSTHROUGH)
    doc["extensions"] = {FLOOR_KEY: bad}
    if bad is None:  # null: as if absent
        assert engine_floor(load_doc(doc, "/r/my-engine.json")) == 0
        return
    with pytest.raises(LemonpackError, match=r'^/r/my-engine.json: extensions\["dev.lemonpack.engine_floor"\]: '
                                             r"expected an integer number of bytes"):
        engine_floor(load_doc(doc, "/r/my-engine.json"))


def test_the_floor_is_added_once_to_the_estimate(tmp_path):
    p = tmp_path / "m.gguf"
    _gguf(p)
    plain = estimate_model(str(p), ctx_size=1024)
    floored = estimate_model(str(p), ctx_size=1024, floor=24 << 20)
    assert floored.total == plain.total + (24 << 20) and floored.floor == 24 << 20
    assert floored.how.endswith(f"+ engine floor {24 << 20} B")
    (tmp_path / "x.bin").write_bytes(b"x" * 10)
    assert estimate_model(str(tmp_path / "x.bin"), floor=5).total == 15


def _vm_rss(pid: int) -> int:
    """``VmRSS`` of ``/proc/PID/status`` in bytes (proc(5))."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_llamacpp_floor_is_what_llama_server_holds(tmp_path):
    """The measurement behind ``ENGINE_FLOORS["llamacpp"]``: the real llama-server on the tiny
    GGUF, its resident set once healthy minus the model's estimate; the table holds within a
    factor of 1.5 of what this machine measures (printed: ``pytest -s`` shows the figure)."""
    import subprocess
    import time

    import httpx

    from support.helpers import free_port
    from support.llama_server import llama_server_dir, write_tiny_gguf

    from lemonpack.runtime.models.memory import ENGINE_FLOORS

    d = llama_server_dir(build=True)
    assert d is not None
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    port = free_port()
    est = estimate_model(str(model), ctx_size=256)
    proc = subprocess.Popen([str(d / "llama-server"), "-m", str(model), "-c", "256", "-t", "1", "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", trust_env=False, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, "llama-server exited"
            time.sleep(0.1)
        else:
            pytest.fail("llama-server was not healthy within 120 s")
        time.sleep(0.5)
        rss = _vm_rss(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    floor = rss - est.total
    print(f"llama-server VmRSS {rss} B ({rss / 2**20:.1f} MiB), tiny model estimate {est.total} B, "
          f"floor {floor / 2**20:.1f} MiB; table {ENGINE_FLOORS['llamacpp'] / 2**20:.1f} MiB")
    assert floor / 1.5 <= ENGINE_FLOORS["llamacpp"] <= floor * 1.5
