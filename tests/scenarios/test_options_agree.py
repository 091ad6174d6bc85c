"""Launch, admission and ``lemonpack select`` see the same launch options (issue 22, "Proof").

A recipe sets ``ctx_size`` only through a ``custom_options`` default (8192, RFC section 4.5);
the registered model sets none. The engine ``lemonpack serve`` starts is launched at
``--ctx-size 8192`` (``build_launch_plan``'s argv), the server admits it against the memory
estimate at that context size (``lemonpack_model_memory_bytes``), and ``lemonpack select
--json`` reports the same ``ctx_size`` and bytes. Before ``runtime/launch/options.py`` was
the one merge, admission and ``select`` ignored ``custom_options`` defaults and estimated at
4096 while the engine ran at 8192.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

from lemonpack.cli import main
from lemonpack.runtime.models.memory import estimate_model

from support.gguf_files import write_gguf
from support.recipes import recipe_doc, write_recipe

CHAT = {"messages": [{"role": "user", "content": "hi"}]}
CPU = '{"os": "linux", "accelerators": ["cpu"]}'


def _model(path):
    """A GGUF whose KV cache grows with the context: 2 layers x (16 x 4) x 2 (K, V) x 2 B per token."""
    return write_gguf(path, "llama", {"llama.block_count": 2, "llama.embedding_length": 64,
                                      "llama.attention.head_count": 4, "llama.attention.head_count_kv": 4},
                      {"token_embd.weight": [64, 16]})


def _recipe(rid: str) -> dict:
    doc = recipe_doc(rid, fake_engine=["--ctx-size", "{ctx_size}"])
    doc["custom_options"] = [{"name": "ctx_size", "cli_flag": "--ctx-size", "default_value": 8192,
                              "help": "context size"}]
    return doc


def _served_ctx(argv) -> int:
    return int(argv[list(argv).index("--ctx-size") + 1])


def _admitted(metrics_text: str, model: str) -> int:
    m = re.search(rf'^lemonpack_model_memory_bytes\{{model="{re.escape(model)}"\}} (\S+)$', metrics_text, re.M)
    assert m, metrics_text
    return int(float(m.group(1)))


def _select(capsys, monkeypatch, lv, model: str) -> dict:
    monkeypatch.setenv("LEMONPACK_BACKENDS_PATH", str(lv.backends))
    monkeypatch.setenv("LEMONPACK_CONFIG_DIR", str(lv.registry.path.parent))
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(lv.registry.path.parent / "cache"))
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", CPU)
    monkeypatch.delenv("LEMONPACK_BACKEND", raising=False)
    capsys.readouterr()
    main(["select", model, "--json"])
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("model_options, load_options, ctx", [
    ({}, None, 8192),                      # the recipe's custom_options default
    ({"ctx_size": 2048}, None, 2048),      # the model's recipe_options over the recipe's default
    ({"ctx_size": 2048}, {"ctx_size": 1024}, 1024),  # load-time options (POST /v1/load) over both
])
def test_launch_admission_and_select_see_the_same_ctx_size(live, tmp_path, capsys, monkeypatch,
                                                           model_options, load_options, ctx):
    lv = live()
    gguf = _model(tmp_path / "ctx.gguf")
    write_recipe(lv.backends / "ctx-default.json", _recipe("ctx-default"))
    lv.registry.add("user.ctx", "ctx-default", {"main": str(gguf)}, model_options)
    lv.start()
    expected = estimate_model(str(gguf), ctx)
    assert expected.kv == 2 * ctx * 64 * 2 * 2  # the figure moves with ctx_size: a wrong ctx cannot pass
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=60) as c:
        if load_options is not None:
            r = c.post("/v1/load", json={"model_name": "user.ctx", "options": load_options})
        else:
            r = c.post("/v1/chat/completions", json={**CHAT, "model": "user.ctx"})
        assert r.status_code == 200, r.text
        launched = _served_ctx(lv.server.runner.engine("user.ctx").argv)  # build_launch_plan's argv, spawned
        admitted = _admitted(c.get("/metrics").text, "user.ctx")  # the estimate admission counted
    assert launched == ctx
    assert admitted == expected.total
    if load_options is None:  # select shows the registered model's options (no load is involved)
        shown = _select(capsys, monkeypatch, lv, "user.ctx")["memory"]
        assert (shown["ctx_size"], shown["bytes"]) == (launched, admitted)


def test_load_options_are_judged_on_the_block_the_launch_picks(live, tmp_path):
    """The model's ``device`` option picks the platform block (section 9); ``POST /v1/load``
    decides which of its options the engine takes on that same block (the one merge), so
    ``ctx_size`` is applied on a block that has ``{ctx_size}`` although the default block
    writes ``--ctx-size 256`` literally."""
    lv = live()
    gguf = _model(tmp_path / "dev.gguf")
    doc = recipe_doc("two-blocks", fake_engine=[])
    cpu = doc["platforms"]["linux"]["cpu"]
    doc["platforms"]["linux"] = {"cpu": {**cpu, "args": [*cpu["args"], "--ctx-size", "256"]},
                                 "vulkan": {**cpu, "args": [*cpu["args"], "--ctx-size", "{ctx_size}"]}}
    write_recipe(lv.backends / "two-blocks.json", doc)
    lv.registry.add("user.dev", "two-blocks", {"main": str(gguf)}, {"device": "vulkan"})
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=60) as c:
        r = c.post("/v1/load", json={"model_name": "user.dev", "ctx_size": 1024})
        assert r.status_code == 200, r.text
        assert r.json()["options"] == {"ctx_size": "1024"} and "ignored_options" not in r.json(), r.json()
        assert _served_ctx(lv.server.runner.engine("user.dev").argv) == 1024
        assert _admitted(c.get("/metrics").text, "user.dev") == estimate_model(str(gguf), 1024).total
