"""Load: 64 clients, 4 models, a memory budget that fits 2 (a real ``lemonpack serve`` process
over the light stdlib fake engine of the cases). Expected: only 200s and the documented 503
``insufficient_memory``; every 200 stream ends with [DONE]; after the models are unloaded the
server's fd and process counts are back where they started, and no engine is left after close."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter

import pytest

from support.recipes import recipe_doc
from support.serve_harness import Serve, engine, pids_tagged

CLIENTS = 64
REQUESTS = int(os.environ.get("LP_LOAD_REQUESTS", "2000"))  # in all


@pytest.mark.slow
def test_64_clients_over_4_models_with_a_budget_for_2(tmp_path):
    tag = f"load-{os.getpid()}"
    models = {f"user.m{i}": f"{tag}-{i}" for i in range(4)}
    # each model file is 9 bytes ("GGUF fake", size on disk): 20 bytes fit two engines
    s = Serve([recipe_doc(r, **engine(r)) for r in models.values()], models, root=str(tmp_path), args=["--memory-budget", "20"])
    s.start()
    try:
        s.get("/v1/health")
        fds0, kids0 = s.fds(), len(s.children())
        results: Counter = Counter()
        cut: list = []
        lock = threading.Lock()
        todo = iter(range(REQUESTS))

        def client(seed: int) -> None:
            rnd = random.Random(seed)
            while True:
                with lock:
                    if next(todo, None) is None:
                        return
                model = rnd.choice(list(models))
                stream = rnd.random() < 0.5
                st, _h, data = s.post("/v1/chat/completions", {"model": model, "stream": stream, "max_tokens": 3,
                                                              "messages": []}, timeout=60)
                kind = json.loads(data)["error"]["type"] if st != 200 else ""
                with lock:
                    results[(st, kind)] += 1
                    if st == 200 and stream and b"[DONE]" not in data:
                        cut.append(data[-200:])

        t0 = time.monotonic()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        took = time.monotonic() - t0
        print(f"{REQUESTS} requests from {CLIENTS} clients in {took:.1f}s: {dict(results)}")
        assert sum(results.values()) == REQUESTS
        assert set(results) <= {(200, ""), (503, "insufficient_memory")}, results
        assert results[(200, "")] > REQUESTS // 4
        assert not cut, cut[:3]
        for m in models:
            assert s.post("/v1/unload", {"model_name": m})[0] == 200
        assert s.children() == [] or len(s.children()) <= kids0
        deadline = time.monotonic() + 10
        while s.fds() > fds0 and time.monotonic() < deadline:
            time.sleep(0.1)  # upstream sessions of stopped engines close on the next use or at close
        assert s.fds() <= fds0, (fds0, s.fds())
    finally:
        s.stop()
    assert s.proc.returncode == 0
    left = [p for r in models.values() for p in pids_tagged(r)]
    assert not left, left
