"""``lemonpack serve`` idle handling: ``--ttl`` unload and ``--soft-idle`` downsize (seed 000
sections 4 and 10), against real fake-engine processes behind a real server."""

from __future__ import annotations

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from lemonpack.runtime.supervisor import State
from tests.server.conftest import fake_doc
from tests.support.helpers import wait_for

CHAT = {"model": "user.fake", "messages": [{"role": "user", "content": "hi"}]}




def test_ttl_unloads_only_after_the_last_request_never_while_starting_or_in_flight(live):
    # starting (1.2 s) and the request itself (1.2 s before its first byte) both outlast the TTL
    lv = live(ttl=0.5, idle_check=0.02)
    lv.add("user.fake", fake_doc("fake-engine", "--health-delay", "1.2", "--first-byte-delay", "1.2"))
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 200, r.text
        done = time.monotonic()
        eng = lv.server.runner.engine("user.fake")
        assert lv.server.runner.starts == 1 and eng.poll() is None
        time.sleep(0.25)  # idle, but not yet for the TTL
        assert lv.server.runner.state("user.fake") is State.READY
        assert wait_for(lambda: eng.poll() is not None, 5), "an idle model past its TTL is unloaded"
        assert time.monotonic() - done >= 0.5
        assert wait_for(lambda: c.get("/v1/models").json()["data"][0]["state"] == "unloaded", 5)


def test_requests_at_ttl_expiry_neither_deadlock_nor_fail(live):
    ttl = 0.3
    lv = live(ttl=ttl, idle_check=0.005)
    lv.add("user.fake", fake_doc())
    lv.start()
    rnd = random.Random(8)
    statuses: list[int] = []
    lock = threading.Lock()

    def one(c: httpx.Client, delay: float) -> None:
        time.sleep(delay)
        code = c.post("/v1/chat/completions", json=CHAT).status_code
        with lock:
            statuses.append(code)

    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c, ThreadPoolExecutor(16) as pool:
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
        for _ in range(8):
            # the burst straddles the moment the model's TTL expires
            time.sleep(rnd.uniform(ttl - 0.04, ttl + 0.04))
            futs = [pool.submit(one, c, rnd.uniform(0, 0.03)) for _ in range(16)]
            for f in futs:
                f.result(timeout=60)  # no deadlock
    assert statuses == [200] * len(statuses) and len(statuses) == 8 * 16
    assert lv.server.runner.starts >= 2, "some bursts met an unloaded or stopping model (the race ran)"


def test_soft_idle_calls_downsize_endpoint_once_per_idle_period(live, tmp_path):
    rec = tmp_path / "record.jsonl"
    doc = fake_doc("fake-engine", "--record", str(rec))
    doc["downsize_endpoint"] = "/downsize"
    lv = live(soft_idle=0.3, idle_check=0.02)
    lv.add("user.fake", doc)
    lv.start()

    def downsizes() -> int:
        lines = rec.read_text().splitlines() if rec.exists() else []
        return sum(1 for ln in lines if json.loads(ln).get("path") == "/downsize")

    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
        time.sleep(0.15)
        assert downsizes() == 0  # not idle long enough yet
        assert wait_for(lambda: downsizes() == 1, 5)
        time.sleep(0.6)
        assert downsizes() == 1  # once per idle period
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200  # a new period
        assert wait_for(lambda: downsizes() == 2, 5)
        time.sleep(0.6)
        assert downsizes() == 2
    eng = lv.server.runner.engine("user.fake")
    assert eng is not None and eng.poll() is None  # downsizing does not unload
