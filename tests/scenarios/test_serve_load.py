"""``lemonpack serve`` under load: 64 concurrent clients, 2,000 requests on loopback, zero errors;
afterwards no leaked connections, file descriptors or processes.

The server runs in this process (a thread, as in conftest.py); the load comes from a separate
Python process (aiohttp, 64 workers over one 64-connection pool) so the server's numbers are
its own. Connections are counted from ``/proc/self/net/tcp`` joined with ``/proc/self/fd``
(this process's sockets whose peer is the engine's port).

slow: about 10 s on 2 shared cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from support.helpers import wait_for

from lemonpack.runtime.engines.proctable import pid_alive
from support.recipes import recipe_doc

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

CLIENTS, REQUESTS = 64, 2000

LOAD = textwrap.dedent("""
    import asyncio, json, sys, time
    import aiohttp

    url, clients, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    chat = {"model": "user.fake", "messages": [{"role": "user", "content": "hi"}]}
    errors, done = [], [0]

    async def one(s, i):
        stream = i % 10 == 0  # every tenth request is streamed (SSE through the proxy)
        async with s.post(url + "/v1/chat/completions", json={**chat, "stream": stream}) as r:
            body = await r.read()
            if r.status != 200:
                return f"{r.status} {body[:200]!r}"
            if stream:
                if not body.rstrip().endswith(b"data: [DONE]"):
                    return f"stream without [DONE]: {body[-200:]!r}"
            elif json.loads(body)["choices"][0]["message"]["content"] != "Hello from the fake engine":
                return f"wrong body {body[:200]!r}"

    async def worker(s, queue):
        while queue:
            i = queue.pop()
            try:
                e = await one(s, i)
            except Exception as ex:  # noqa: BLE001
                e = f"{type(ex).__name__}: {ex}"
            if e:
                errors.append(e)
            done[0] += 1

    async def main():
        queue = list(range(total))
        conn = aiohttp.TCPConnector(limit=clients)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=60)) as s:
            t0 = time.monotonic()
            await asyncio.gather(*(worker(s, queue) for _ in range(clients)))
            return time.monotonic() - t0

    took = asyncio.run(main())
    print(json.dumps({"done": done[0], "errors": errors[:20], "n_errors": len(errors), "seconds": took}))
""")


def fds() -> set[str]:
    """This process's open file descriptors as ``fd -> target`` strings."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            pass  # the listdir's own fd, closed meanwhile
    return out


def sockets_to(port: int) -> list[str]:
    """States (hex, /proc/net/tcp ``st``) of this process's TCP sockets whose peer port is ``port``."""
    ours = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            t = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if t.startswith("socket:["):
            ours.add(t[8:-1])
    states = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                remote, st, inode = cols[2], cols[3], cols[9]
                if inode in ours and int(remote.rsplit(":", 1)[1], 16) == port:
                    states.append(st)
    return states


def engine_children() -> list[int]:
    """Live children of this process running the fake engine."""
    me, found = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me and b"fake_engine" in cmd and pid_alive(int(d)):
            found.append(int(d))
    return found


def test_64_clients_2000_requests_no_errors_no_leaks(live):
    lv = live(max_in_flight=CLIENTS)
    lv.add("user.fake", recipe_doc(fake_engine=[]))
    lv.start()
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        c.get("/v1/health").raise_for_status()
        # the baseline: an fd open only for a moment (the watcher's rescan holds a directory fd)
        # is compared as "fd -> target" below, with a tolerance of 2 and a poll
        before = fds()
        c.post("/v1/load", json={"model_name": "user.fake"}).raise_for_status()
        eng = lv.server.runner.engine("user.fake")
        port = urlsplit(eng.url).port

        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-c", LOAD, lv.url, str(CLIENTS), str(REQUESTS)],
                           capture_output=True, text=True, timeout=90)
        took = time.monotonic() - t0
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout)
        print(f"\n{REQUESTS} requests, {CLIENTS} clients: {res['seconds']:.2f} s "
              f"({REQUESTS / res['seconds']:.0f} req/s); load process {took:.2f} s")
        assert res["n_errors"] == 0, res["errors"]
        assert res["done"] == REQUESTS
        assert lv.server.in_flight.get("user.fake", 0) == 0
        assert lv.server.runner.starts == 1

        # the pool to the engine: at most one connection per concurrent client, all idle and open
        # (01 = ESTABLISHED); nothing half-closed left behind by the streamed answers
        pool = sockets_to(port)
        print(f"pooled connections to the engine after the load: {len(pool)}")
        assert len(pool) <= CLIENTS, pool
        assert set(pool) <= {"01"}, pool

        c.post("/v1/unload", json={"model_name": "user.fake"}).raise_for_status()
        assert eng.poll() is not None
    assert not pid_alive(eng.pid)
    assert engine_children() == []
    # after unload: no socket to the (dead) engine's port, in any state
    assert wait_for(lambda: sockets_to(port) == [], 5, 0.05), sockets_to(port)
    # fds back to where they were before the engine was loaded (compared as "fd -> target", so a
    # socket closed and another opened on the same number still counts as new). Tolerance 2: the
    # discovery watcher rescans the backends directory every 0.2 s and holds a directory fd while
    # it does, and the asyncio executor may be mid-call; measured: 0 new fds in repeated runs. A
    # per-request or per-connection leak would show as tens to hundreds here.
    assert wait_for(lambda: len(fds() - before) <= 2, 5, 0.05), sorted(fds() - before)
