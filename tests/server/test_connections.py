"""Connections and bodies bounded (issue 27, point 5; case 81): the cap and its idle reuse,
the header timeout, the body budget and body timeout, the soft open-files limit raised, one
log line per condition, and a real flood of 1,100 idle connections at ``ulimit -n 1024``."""

from __future__ import annotations

import json
import logging
import resource
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from aiohttp import web

from lemonpack.runtime.engines import proctable
from lemonpack.server.connections import FD_RESERVE, Limits, Once, connection_cap
from support.recipes import recipe_doc
from support.serve_proc import serve_proc

CHAT = {"model": "user.fake", "messages": [{"role": "user", "content": "hi"}]}


def test_the_cap_leaves_two_descriptors_per_connection_and_a_reserve():
    assert connection_cap(1024, 1024) == (1024 - FD_RESERVE) // 2 == 480
    assert connection_cap(1024, 20000) == 1024
    assert connection_cap(10, resource.RLIM_INFINITY) == 10


def test_once_folds_repeats_into_the_next_line(caplog):
    once = Once(every=0.2)
    with caplog.at_level(logging.INFO, logger="lemonpack.server"):
        assert once.tell("x", "out of fds")
        assert not any(once.tell("x", "out of fds") for _ in range(500))
        time.sleep(0.25)
        assert once.tell("x", "out of fds")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["out of fds", "out of fds (500 more in the last 0.2 s)"]


def test_the_loop_handler_folds_fd_exhaustion_and_passes_the_rest(caplog):
    import asyncio
    import errno

    from lemonpack.server.connections import quiet_exception_handler

    loop = asyncio.new_event_loop()
    try:
        handler = quiet_exception_handler(Once(every=60))
        with caplog.at_level(logging.INFO):
            for _ in range(1000):  # what asyncio reports per failed accept
                handler(loop, {"message": "socket.accept() out of system resource",
                               "exception": OSError(errno.EMFILE, "Too many open files")})
            handler(loop, {"message": "something else", "exception": ValueError("x")})
    finally:
        loop.close()
    ours = [r for r in caplog.records if r.name == "lemonpack.server"]
    assert len(ours) == 1 and "out of file descriptors" in ours[0].getMessage() and not ours[0].exc_info
    assert any(r.name == "asyncio" and "something else" in r.getMessage() for r in caplog.records)


def test_the_handler_attributes_the_guard_reads_exist():
    """:class:`GuardedHandler` reads three attributes of aiohttp's handler: fail here, not in
    production, when an aiohttp release renames them."""
    import asyncio

    async def make():
        srv = web.Server(lambda r: web.Response())
        return web.RequestHandler(srv, loop=asyncio.get_running_loop())
    h = asyncio.run(make())
    assert h._current_request is None and len(h._messages) == 0 and h._request_count == 0


def test_raise_nofile_raises_the_soft_limit_and_engines_get_it_back(tmp_path):
    """In a child process (its limits are its own): soft 1024 of hard 4096 is raised to 4096;
    a process spawned with the engines' preexec sees 1024 again."""
    code = (
        "import resource, subprocess, sys, os\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 4096))\n"
        "from lemonpack.runtime.engines import proctable\n"
        "print(proctable.raise_nofile(), resource.getrlimit(resource.RLIMIT_NOFILE))\n"
        "out = subprocess.run([sys.executable, '-c', 'import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE))'],"
        " capture_output=True, text=True, preexec_fn=proctable.pdeathsig_preexec(os.getpid())).stdout\n"
        "print(out.strip())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["(1024, 4096) (4096, 4096)", "(1024, 4096)"]
    assert proctable.raise_nofile.__doc__


def _limit_nofile(n: int):
    def pre() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return pre


@pytest.mark.slow
def test_1100_idle_connections_at_ulimit_1024_do_not_take_serve_down(tmp_path):
    """serve at ``ulimit -n 1024`` (soft and hard, so raising cannot help): 1,100 connections
    that send nothing. Requests are still answered 200 (the idle connections give way), no
    traceback floods the log, the watcher does not unload the model, and past the cap with
    every connection busy a connection gets 503 in the OpenAI shape."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2400:
        pytest.skip("this test needs a hard open-files limit of 2400 for its own sockets")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2400), hard))
    conns: list[socket.socket] = []
    try:
        with serve_proc(tmp_path, recipe_doc(fake_engine=[]), "--no-engine-output", preexec=_limit_nofile(1024)) as s:
            assert s.client.post("/v1/chat/completions", json=CHAT).status_code == 200
            t0 = time.monotonic()
            for _ in range(1100):
                conns.append(socket.create_connection(("127.0.0.1", s.port), timeout=5))
            time.sleep(1)
            got = [s.client.post("/v1/chat/completions", json=CHAT, headers={"Connection": "close"}).status_code
                   for _ in range(5)]
            assert got == [200] * 5, s.log()[-3000:]
            assert time.monotonic() - t0 < 30
            models = s.client.get("/v1/models").json()["data"]
            assert [(m["id"], m["state"]) for m in models] == [("user.fake", "ready")]
            for c in conns:
                c.close()
            conns.clear()
            time.sleep(0.5)
            assert s.client.post("/v1/chat/completions", json=CHAT).status_code == 200
            log = s.log()
        assert "Traceback" not in log, log[-3000:]
        assert log.count("Too many open files") <= 3, log[-3000:]
        assert "is gone; unloading" not in log and "unloaded" not in log.split("stopped")[0], log[-3000:]
        assert "connection cap 480" in log  # said once at start, then once per interval at most
        assert log.count("closing the connections idle longest") <= 3, log[-2000:]
    finally:
        for c in conns:
            c.close()


@pytest.mark.slow
def test_past_the_cap_with_every_connection_busy_is_503_and_a_slow_head_408(tmp_path):
    doc = recipe_doc("fake-engine", fake_engine=["--first-byte-delay", "3"])
    with serve_proc(tmp_path, doc, "--no-engine-output", "--max-connections", "3", "--header-timeout", "1") as s:
        def chat() -> int:
            with httpx.Client(base_url=s.url, trust_env=False, timeout=30) as c:
                return c.post("/v1/chat/completions", json=CHAT).status_code
        with ThreadPoolExecutor(4) as ex:
            busy = [ex.submit(chat) for _ in range(3)]
            time.sleep(1.5)  # the three are in flight (the engine waits 3 s before answering)
            with socket.create_connection(("127.0.0.1", s.port), timeout=5) as c:
                c.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = _read_all(c)
            assert [f.result() for f in busy] == [200, 200, 200]
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in head, answer
        assert json.loads(body)["error"]["type"] == "server_busy"
        # a head that does not complete within --header-timeout: 408, closed
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as c:
            c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            t = time.monotonic()
            answer = _read_all(c)
        assert answer.startswith(b"HTTP/1.1 408") and 0.8 < time.monotonic() - t < 4, answer
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["type"] == "invalid_request_error"
        # a connection that sends nothing is closed within the header timeout, unanswered
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as c:
            assert _read_all(c) == b""
        assert s.client.get("/v1/health").status_code == 200


def _read_all(c: socket.socket) -> bytes:
    out = b""
    while chunk := c.recv(65536):
        out += chunk
    return out


def _read_answer(c: socket.socket) -> bytes:
    """One HTTP answer with a Content-Length (the connection may stay open)."""
    out = b""
    while b"\r\n\r\n" not in out:
        out += c.recv(65536)
    head, _, body = out.partition(b"\r\n\r\n")
    n = next(int(ln.split(b":")[1]) for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:"))
    while len(body) < n:
        body += c.recv(65536)
    return head + b"\r\n\r\n" + body


def _vm_hwm(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no VmHWM")


@pytest.mark.slow
def test_eight_concurrent_60_mib_bodies_stay_within_the_body_budget(tmp_path):
    """8 concurrent 60 MiB JSON bodies: serve's peak memory stays under 500 MiB; those past
    the budget (256 MiB by default) get 503 ``server_busy`` in the OpenAI shape at once, the
    others reach the engine."""
    body = json.dumps({"model": "user.fake", "messages": [{"role": "user", "content": "a" * (60 << 20)}]}).encode()
    with serve_proc(tmp_path, recipe_doc(fake_engine=[]), "--no-engine-output") as s:
        assert s.client.post("/v1/chat/completions", json=CHAT).status_code == 200

        def send() -> tuple[int, dict]:
            with httpx.Client(base_url=s.url, trust_env=False, timeout=120) as c:
                r = c.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
                return r.status_code, r.json()
        with ThreadPoolExecutor(8) as ex:
            results = list(ex.map(lambda _: send(), range(8)))
        peak = _vm_hwm(s.proc.pid)
        codes = sorted(st for st, _ in results)
        assert peak < 500 << 20, (peak >> 20, codes)
        assert 200 in codes and 503 in codes, codes
        refused = [doc for st, doc in results if st == 503]
        assert all(d["error"]["type"] == "server_busy" and "--body-budget" in d["error"]["message"] for d in refused), \
            (refused, peak >> 20)
        # the budget is given back: one more body goes through
        assert send()[0] == 200
    limits = Limits()
    assert limits.body_timeout == 60.0


@pytest.mark.slow
def test_a_body_that_stops_coming_is_408_after_the_body_timeout(tmp_path):
    with serve_proc(tmp_path, recipe_doc(fake_engine=[]), "--no-engine-output", "--body-timeout", "1") as s:
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
            c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100\r\n\r\n{\"model\": ")
            t = time.monotonic()
            answer = _read_answer(c)
            took = time.monotonic() - t
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert 0.8 < took < 5, took
        assert "--body-timeout" in json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["message"]
