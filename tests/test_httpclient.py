"""lemonpack.httpclient: the one factory of lemonpack's HTTP clients, against a real HTTP
server on 127.0.0.1 (what each client sends, its proxy policy, timeouts)."""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from lemonpack import httpclient


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every request with 200 and records ``(method, request target, headers)``."""

    seen: list[tuple[str, str, dict[str, str]]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        type(self).seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list]]:
    handler = type("Handler", (_Recorder,), {"seen": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler.seen
    finally:
        srv.shutdown()
        srv.server_close()


def test_client_sends_httpx_user_agent_and_given_headers(server):
    url, seen = server
    with httpclient.client(timeout=5.0, trust_env=False, headers={"X-Test": "1"}) as c:
        assert c.get(url + "/a").status_code == 200
    _, target, headers = seen[-1]
    assert target == "/a" and headers["user-agent"] == httpclient.HTTPX_USER_AGENT == f"python-httpx/{httpx.__version__}"
    assert headers["x-test"] == "1"


def test_user_agent_none_sends_none_and_headers_win(server):
    url, seen = server
    with httpclient.client(timeout=5.0, trust_env=False, user_agent=None) as c:
        c.get(url)
    assert "user-agent" not in seen[-1][2]
    with httpclient.client(timeout=5.0, trust_env=False, user_agent=None, headers={"User-Agent": "me/1"}) as c:
        c.get(url)
    assert seen[-1][2]["user-agent"] == "me/1"
    with httpclient.client(timeout=5.0, trust_env=False, user_agent="lemonpack-test/0") as c:
        c.get(url)
    assert seen[-1][2]["user-agent"] == "lemonpack-test/0"


def test_async_client_posts_an_empty_body_as_the_downsize_call_does(server):
    """What ``serve`` sends to a ``downsize_endpoint``: POST, ``Content-Length: 0``, no
    ``User-Agent``, no ``Content-Type`` (as aiohttp's session with skip_auto_headers did)."""
    url, seen = server

    async def go() -> int:
        c = httpclient.async_client(timeout=None, trust_env=False, user_agent=None, max_connections=None)
        try:
            async with c.stream("POST", url + "/downsize", content=b"") as r:
                async for _ in r.aiter_raw():
                    pass
                return r.status_code
        finally:
            await c.aclose()

    assert asyncio.run(go()) == 200
    method, target, headers = seen[-1]
    assert (method, target, headers["content-length"]) == ("POST", "/downsize", "0")
    assert "user-agent" not in headers and "content-type" not in headers


def test_trust_env_is_the_proxy_policy(server, monkeypatch):
    """``trust_env=True`` sends a request through ``HTTP_PROXY`` (the recorder stands for the
    proxy: it sees the absolute URL); ``trust_env=False`` ignores it and connects itself, to a
    port where nothing listens."""
    proxy, seen = server
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/file"
    monkeypatch.setenv("HTTP_PROXY", proxy)
    for var in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    with httpclient.client(timeout=5.0, trust_env=True) as c:
        assert c.get(closed).status_code == 200
    assert seen[-1][1] == closed
    with httpclient.client(timeout=5.0, trust_env=False) as c, pytest.raises(httpx.ConnectError):
        c.get(closed)
    assert len(seen) == 1


def test_timeouts_and_redirects_are_what_the_caller_says():
    with httpclient.client(timeout=60.0, connect_timeout=30.0, trust_env=True) as c:
        assert c.timeout == httpx.Timeout(60.0, connect=30.0)
        assert c.follow_redirects is False
    with httpclient.client(timeout=2.0, trust_env=False, follow_redirects=True) as c:
        assert c.timeout == httpx.Timeout(2.0) and c.follow_redirects is True
    with httpclient.client(timeout=None, connect_timeout=10.0, trust_env=False) as c:
        assert c.timeout == httpx.Timeout(None, connect=10.0)
    for bad in (0, -1.0, True):
        with pytest.raises(ValueError, match="timeout"):
            httpclient.client(timeout=bad, trust_env=False)


def test_both_parameters_without_defaults_must_be_given():
    with pytest.raises(TypeError):
        httpclient.client(trust_env=False)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        httpclient.async_client(timeout=1.0)  # type: ignore[call-arg]


# ---- transfer bounds (issue 28: a trickling or endless body cannot hold a reader) -------------

def _read(c: httpx.Client, url: str) -> bytes:
    with c.stream("GET", url) as r:
        return b"".join(r.iter_raw())


def test_min_rate_stops_a_trickle_soon_after_the_grace_period():
    from support.slowserver import SlowServer

    with SlowServer(interval=0.2) as s, httpclient.client(timeout=5, trust_env=False) as c:
        t0 = __import__("time").monotonic()
        with httpclient.bounded(c, httpclient.TransferBounds(min_rate=1000, grace=1.0)):
            with pytest.raises(httpclient.TransferBoundError, match="below the minimum rate of 1000 bytes/s"):
                _read(c, s.base + "/trickle/x")
        assert __import__("time").monotonic() - t0 < 4  # the 5 s read timeout never had to trip


def test_deadline_stops_a_body_that_keeps_coming():
    from support.slowserver import SlowServer

    with SlowServer(interval=0.1) as s, httpclient.client(timeout=5, trust_env=False) as c:
        with httpclient.bounded(c, httpclient.TransferBounds(deadline=1.0)):
            with pytest.raises(httpclient.TransferBoundError, match=r"not complete after 1 s \(deadline"):
                _read(c, s.base + "/trickle/x")


def test_size_limit_is_applied_while_reading():
    """An endless body stops at the first chunk past the limit: the server wrote little more."""
    from support.slowserver import SlowServer

    with SlowServer() as s, httpclient.client(timeout=5, trust_env=False) as c:
        with httpclient.bounded(c, httpclient.TransferBounds(max_body_bytes=100_000)):
            with pytest.raises(httpclient.TransferBoundError, match="larger than 100000 bytes"):
                _read(c, s.base + "/endless/x")
            with pytest.raises(httpclient.TransferBoundError, match="the body is 1073741824 bytes"):
                _read(c, s.base + "/big/x")  # refused from its Content-Length, before the body
        assert s.bytes_sent < 64 * 1024 * 1024  # socket buffers, never the whole stream


def test_bounds_leave_the_client_when_the_block_ends_and_pass_good_bodies():
    from support.slowserver import SlowServer

    with SlowServer({"/ok": b"x" * 5000}) as s, httpclient.client(timeout=5, trust_env=False) as c:
        with httpclient.bounded(c, httpclient.TransferBounds(max_body_bytes=5000, deadline=5, min_rate=1)):
            assert _read(c, s.base + "/ok") == b"x" * 5000
        assert c.event_hooks == {"request": [], "response": []}
        with httpclient.bounded(c, httpclient.TransferBounds(max_body_bytes=10)):
            with pytest.raises(httpclient.TransferBoundError):
                _read(c, s.base + "/ok")
        assert _read(c, s.base + "/ok") == b"x" * 5000  # unbounded again


def test_httpx_is_imported_without_its_cli_or_httpcore_trio_backend_and_those_still_import_elsewhere():
    """lemonpack/__init__'s finder: httpx's command-line client (click, pygments, rich),
    httpcore's trio backend and its HTTP/2 (h2) are not loaded by httpx (peak RSS of every registry command), yet
    an import of them from anywhere else works, and httpx still makes requests."""
    import subprocess
    import sys

    code = ("import sys, lemonpack.httpclient as h, httpcore\n"
            "h.client(timeout=5, trust_env=False).close()\n"
            "print(sorted(m for m in ('trio', 'click', 'pygments', 'rich', 'h2') if m in sys.modules))\n"
            "import importlib.util\n"
            "for m in ('trio', 'click', 'pygments', 'h2'):\n"
            "    if importlib.util.find_spec(m) is not None:\n"
            "        __import__(m)\n"
            "        assert m in sys.modules, m\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[]", "ok"]


def test_deadline_stops_a_server_trickling_its_headers():
    # a variant of case 73: the status line and headers one byte at a time, each read inside the
    # client's timeout; the deadline holds for them too and says so
    import socket
    import threading
    import time

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    stop = threading.Event()

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(4096)
            for b in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 200:
                if stop.is_set():
                    return
                try:
                    conn.sendall(bytes([b]))
                except OSError:
                    return
                time.sleep(0.2)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    url = f"http://127.0.0.1:{srv.getsockname()[1]}/r"
    t0 = time.monotonic()
    try:
        with httpclient.client(timeout=5, trust_env=False) as c:
            with httpclient.bounded(c, httpclient.TransferBounds(deadline=1.0)):
                with pytest.raises(httpclient.TransferBoundError, match=r"no complete answer after 1 s \(deadline"):
                    _read(c, url)
            assert "send" not in vars(c)  # the client's own send again
    finally:
        stop.set()
        srv.close()
    assert time.monotonic() - t0 < 4
