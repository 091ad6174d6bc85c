"""Every engine event is a log line and an event on ``GET /v1/events`` (issue 27, point 2;
case 79): a ready engine SIGKILLed (as the OOM killer does), one replaced by the watchdog,
unloaded by a client, evicted for another model, a request refused by admission."""

from __future__ import annotations

import json
import os
import queue
import signal
import threading
import time

import httpx
import pytest

from lemonpack.runtime.lifecycle.runner import exit_text
from lemonpack.server.events import EngineEvents
from support.recipes import recipe_doc
from support.serve_proc import serve_proc
from support.helpers import wait_for


def chat(model: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}]}


class Events:
    """A reader of ``/v1/events`` in a thread: ``get(kind)`` waits for the next event of ``kind``."""

    def __init__(self, url: str) -> None:
        self.q: queue.Queue[dict] = queue.Queue()
        self.connected = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(url,), daemon=True)
        self.thread.start()
        assert self.connected.wait(20)

    def _run(self, url: str) -> None:
        with httpx.Client(trust_env=False, timeout=httpx.Timeout(5, read=None)) as c:
            with c.stream("GET", url + "/v1/events") as r:
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                self.connected.set()
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        self.q.put(json.loads(line[6:]))

    def get(self, kind: str, timeout: float = 20) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                ev = self.q.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                break
            if ev["event"] == kind:
                return ev
        raise AssertionError(f"no {kind!r} event within {timeout} s")


def _pid(tmp_path) -> int:
    lines = (tmp_path / "pids").read_text().split()
    return int(lines[-1])


@pytest.mark.slow
def test_a_ready_engine_sigkilled_is_a_log_line_and_an_event(tmp_path):
    doc = recipe_doc("fake-engine", fake_engine=["--pid-file", str(tmp_path / "pids")])
    with serve_proc(tmp_path, doc, "--no-engine-output") as s:
        ev = Events(s.url)
        assert s.client.post("/v1/chat/completions", json=chat("user.fake")).status_code == 200
        ready = ev.get("ready")
        pid = _pid(tmp_path)
        assert ready["model"] == "user.fake" and ready["pid"] == pid
        os.kill(pid, signal.SIGKILL)
        gone = ev.get("exited")
        assert gone["model"] == "user.fake" and gone["signal"] == 9 and gone["pid"] == pid, gone
        assert "SIGKILL" in gone["message"]
        assert wait_for(lambda: any("user.fake" in ln and "SIGKILL" in ln and "exited" in ln for ln in s.lines), 10), \
            s.log()
        ev.get("stopped")
        # a client's unload is told with who sent it
        assert s.client.post("/v1/chat/completions", json=chat("user.fake")).status_code == 200
        assert s.client.post("/v1/unload", json={"model_name": "user.fake"}).status_code == 200
        un = ev.get("unloaded")
        assert un["by"].startswith("POST /v1/unload from 127.0.0.1"), un
        assert any("unloaded by POST /v1/unload from 127.0.0.1" in ln for ln in s.lines), s.log()
        # a client that reconnects with Last-Event-ID gets what it missed
        with httpx.Client(trust_env=False, timeout=httpx.Timeout(5, read=2)) as c:
            with c.stream("GET", s.url + "/v1/events", headers={"Last-Event-ID": str(ready["id"])}) as r:
                got = []
                try:
                    for line in r.iter_lines():
                        if line.startswith("data: "):
                            got.append(json.loads(line[6:])["event"])
                        if "unloaded" in got:
                            break
                except httpx.ReadTimeout:
                    pass
        assert got[0] == "exited" and "unloaded" in got, got


@pytest.mark.slow
def test_watchdog_eviction_and_refusal_are_events(tmp_path):
    """The watchdog replacing an engine that stops answering its health check (SIGSTOP),
    an idle model evicted for another (with whom), and a request refused for memory."""
    doc = recipe_doc("fake-engine", fake_engine=["--pid-file", str(tmp_path / "pids")])
    doc["health_probe"]["poll_interval_ms"] = 50
    with serve_proc(tmp_path, doc, "--no-engine-output", "--memory-budget", "1500B",
                    models=("user.a", "user.b", "user.big"), size=1000) as s:
        ev = Events(s.url)
        assert s.client.post("/v1/chat/completions", json=chat("user.a")).status_code == 200
        pid = _pid(tmp_path)
        os.kill(pid, signal.SIGSTOP)
        try:
            rep = ev.get("replaced", timeout=30)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert rep["model"] == "user.a" and rep["pid"] == pid and "health check failed" in rep["reason"], rep
        ev.get("stopped")
        assert s.client.post("/v1/chat/completions", json=chat("user.a")).status_code == 200
        assert s.client.post("/v1/chat/completions", json=chat("user.b")).status_code == 200
        evicted = ev.get("evicted")
        assert evicted["model"] == "user.a" and evicted["for"] == "user.b", evicted
        assert any("evicted" in ln and "user.b" in ln for ln in s.lines)
    # the engine still running at the end is unloaded by the shutdown, and says so
    assert any("user.b" in ln and "by=shutdown" in ln for ln in s.lines), s.log()
    # refusal: a model larger than the budget, told once per second however many ask
    (tmp_path / "two").mkdir()
    with serve_proc(tmp_path / "two", doc, "--no-engine-output", "--memory-budget", "500B",
                    models=("user.big",), size=1000) as s:
        ev = Events(s.url)
        codes = [s.client.post("/v1/chat/completions", json=chat("user.big")).status_code for _ in range(5)]
        assert codes == [503] * 5
        ref = ev.get("refused")
        assert ref["model"] == "user.big" and ref["kind"] == "insufficient_memory" and ref["status"] == 503
        assert sum("refused" in ln for ln in s.lines) <= 2, s.log()


def test_an_event_is_one_log_line_whatever_its_reason_holds(caplog):
    import asyncio
    import logging

    from lemonpack.server.logs import TextLogFormatter

    async def run() -> None:
        EngineEvents().emit("start_failed", "user.a\nx", "engine failed to start: boom",
                            reason="boom\nlast log lines:\n  a\n  b")
    with caplog.at_level(logging.INFO, logger="lemonpack.server.events"):
        asyncio.run(run())
    (rec,) = caplog.records
    text = TextLogFormatter().format(rec)
    assert "\n" not in text and "event=start_failed" in text and "reason=boom last log lines: a b" in text, text


def test_events_answer_loopback_clients_only():
    import asyncio
    from unittest import mock

    from aiohttp.test_utils import make_mocked_request

    async def ask(peer: str) -> int:
        transport = mock.Mock()
        transport.get_extra_info.side_effect = lambda k, d=None: (peer, 5555) if k == "peername" else d
        resp = await EngineEvents().stream(make_mocked_request("GET", "/v1/events", transport=transport))
        return resp.status
    assert asyncio.run(ask("10.1.2.3")) == 403


def test_exit_text_names_the_signal():
    assert exit_text(3) == "engine exited with code 3"
    assert exit_text(-9) == "engine exited with code -9 (killed by signal SIGKILL)"


def test_a_stream_that_falls_behind_is_closed_and_events_are_kept():
    import asyncio

    async def run() -> tuple[int, bool]:
        hub = EngineEvents()
        q: asyncio.Queue = asyncio.Queue()
        hub._streams.add(q)
        for i in range(1100):
            hub.emit("ready", f"m{i}", "engine ready")
        return len(hub.recent()), q in hub._streams
    kept, still = asyncio.run(run())
    assert kept == 256 and not still
