"""``lemonpack serve``'s memory admission for a model registered by ``oci://`` (issue 23, point 3):
the estimate is read from the artifact's GGUF header, fetched alone by ``Range`` from the real
registry, before any weight is: a model too big for the budget is refused with nothing of its
weights in the model store; within the budget it is admitted at that estimate and pulled (that the
engine is launched with the store's path is ``test_oci_models_e2e.py``'s, with the real llama-server)."""

from __future__ import annotations

import httpx

from lemonpack.runtime.models.memory import estimate_model
from lemonpack.runtime.models.push import push_model
from support.gguf_files import write_gguf
from support.recipes import recipe_doc, write_recipe

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def _big_gguf(path):
    return write_gguf(path, "llama", {"llama.block_count": 2, "llama.embedding_length": 64,
                                      "llama.attention.head_count": 4},
                      {"token_embd.weight": [64, 32768]})  # 8 MiB of weights after a small header


def _store_bytes(root) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def test_admission_reads_the_header_and_refuses_before_the_weights_are_fetched(live, registry, tmp_path,
                                                                               monkeypatch):
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    gguf = _big_gguf(tmp_path / "big.gguf")
    ref = f"oci://{registry.host}/models/big@{push_model([gguf], f'{registry.host}/models/big:v1').digest}"
    need = estimate_model(str(gguf), 4096).total  # the recipe's default ctx_size
    doc = recipe_doc("fake-oci", fake_engine=[])
    small = live(memory_budget=need // 2)
    write_recipe(small.backends / "fake-oci.json", doc)
    small.registry.add("user.big", "fake-oci", {"main": ref})
    small.start()
    with httpx.Client(base_url=small.url, trust_env=False, timeout=60) as c:
        r = c.post("/v1/chat/completions", json={**CHAT, "model": "user.big"})
    assert r.status_code == 503, r.text
    assert r.json()["error"]["type"] == "insufficient_memory"
    assert f"needs {need / (1 << 20):.1f} MiB, more than the whole memory budget" in r.json()["error"]["message"]
    assert small.server.runner.starts == 0
    store = tmp_path / "cache" / "models"
    assert 0 < _store_bytes(store) < gguf.stat().st_size / 4  # manifest, config and the header: no weights
    small.close()


def test_within_the_budget_the_model_is_admitted_at_the_header_estimate_and_pulled(live, registry, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    gguf = _big_gguf(tmp_path / "big.gguf")
    ref = f"oci://{registry.host}/models/big@{push_model([gguf], f'{registry.host}/models/big:v1').digest}"
    lv = live(memory_budget=1 << 30)
    write_recipe(lv.backends / "fake-oci.json", recipe_doc("fake-oci", fake_engine=[]))
    lv.registry.add("user.big", "fake-oci", {"main": ref})
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=60) as c:
        r = c.post("/v1/chat/completions", json={**CHAT, "model": "user.big"})
    assert r.status_code == 200, r.text
    assert lv.server.policy.memory() == {"user.big": estimate_model(str(gguf), 4096).total}
    store = tmp_path / "cache" / "models"
    assert _store_bytes(store) > gguf.stat().st_size  # pulled (blob and the view's file)


def test_a_backend_override_sees_the_artifacts_file_name(live, registry, tmp_path, monkeypatch):
    """With a backend override the selector matches the recipe's ``*.gguf`` against the artifact's
    main file name (read with its header), not the reference's digest."""
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(tmp_path / "cache"))
    gguf = _big_gguf(tmp_path / "big.gguf")
    ref = f"oci://{registry.host}/models/big@{push_model([gguf], f'{registry.host}/models/big:v1').digest}"
    lv = live(memory_budget=1 << 30)
    write_recipe(lv.backends / "fake-oci.json", recipe_doc("fake-oci", fake_engine=[],
                                                          extensions={"dev.lemonpack.serves": ["*.gguf"]}))
    lv.registry.add("user.big", "fake-oci", {"main": ref}, backend="fake-oci")
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=60) as c:
        r = c.post("/v1/chat/completions", json={**CHAT, "model": "user.big"})
    assert r.status_code == 200, r.text


def test_a_pull_serve_makes_off_a_terminal_is_logged_a_line_per_step(registry, tmp_path, monkeypatch):
    """serve with stderr no terminal (a service, a pipe): pulling an oci:// checkpoint logs a
    progress line per 10% on the server's logger instead of drawing a bar nobody sees."""
    import io
    import logging
    import sys

    from lemonpack.runtime.models.registry import ModelRegistry
    from lemonpack.runtime.recipes.discovery import Discovery, SearchDir
    from lemonpack.runtime.recipes.watch import DiscoveryWatcher
    from lemonpack.server.catalog import Catalog

    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal, whatever runs the suite
    gguf = _big_gguf(tmp_path / "big.gguf")
    ref = f"oci://{registry.host}/models/logged@{push_model([gguf], f'{registry.host}/models/logged:v1').digest}"
    write_recipe(tmp_path / "backends" / "fake-oci.json", recipe_doc("fake-oci", fake_engine=[]))
    models = ModelRegistry(tmp_path / "user_models.json")
    models.add("user.big", "fake-oci", {"main": ref})
    catalog = Catalog(models, DiscoveryWatcher(Discovery([SearchDir(tmp_path / "backends", "user")])),
                      model_files=False, progress=True)
    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("lemonpack.server")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        plan = catalog.plan("user.big")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    pulled = [line for line in lines if line.startswith("model user.big: pulling: ")]
    assert pulled and pulled[-1].startswith("model user.big: pulling: 100% ("), lines
    assert 1 < len(pulled) <= 12 and "%" in pulled[0], pulled
    assert sys.stderr.getvalue() == ""  # no bar drawn into the log
    from lemonpack.paths import cache_root

    assert plan.model == "user.big"
    assert [f.read_bytes() == gguf.read_bytes() for f in (cache_root() / "models").rglob("big.gguf")] == [True]
