"""Proxy benchmark: what ``lemonpack serve`` adds to a request, with Debian's nginx as the anchor.

    python bench/proxy.py [--requests N] [--chunks N] [--streams N] [--no-nginx]

All in one run, against the same fake engine process (a minimal asyncio HTTP/1.1 server in
this file, ``--engine`` mode, launched by ``lemonpack serve`` from a recipe in a private
``LEMONPACK_CONFIG_DIR``):

1. small ``POST /v1/chat/completions`` latency (sequential, one keep-alive connection per
   target, after a warm-up), interleaved in rounds so every target sees the same machine
   state: *direct* to the engine, through ``python -m lemonpack.cli serve`` (a subprocess),
   and through ``nginx -c FILE -p DIR -g 'daemon off;'`` (127.0.0.1 only, proxy_buffering off,
   keepalive upstream) when nginx is installed; p50 and p99 of each and what each proxy adds;
2. an SSE stream of ``--chunks`` events: time to first chunk and total time, direct versus
   through lemonpack (best of ``--streams``), and the throughput ratio;
3. the floor of a Python fast path (:func:`run_fastpath`: an asyncio ``Protocol`` with
   httptools' parser, not serve's code) in the small-POST rounds, with its CPU per request:
   the figure behind the decision in ``docs/architecture.md`` (the server room);
4. the relay client alone (:func:`relay_clients`): the proxy's own ``server/upstream.py``
   against an httpx stream made by ``lemonpack.httpclient``, in this process, on the same
   engine: why the proxy keeps its relay (``docs/architecture.md``, the server room).

Targets (issue 8): added p50 <= 1 ms; streaming throughput >= 0.9x direct. The client is a
raw blocking socket that reads a chunked stream whole without decoding it (no HTTP library
overhead in the figures). Everything it starts is
stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = "user.bench-tiny"
RECIPE = "bench-engine"
SMALL_BODY = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                         "max_tokens": 1}).encode()
SMALL_REPLY = json.dumps({"id": "x", "object": "chat.completion", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}).encode()
EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"tok"}}]}\n\n'


# -- the fake engine (runs as its own process, started by lemonpack serve)

async def _engine_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            hdrs = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            body = await reader.readexactly(int(hdrs.get("content-length", "0")))
            if method == "GET" and path == "/health":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n")
                continue
            doc = json.loads(body) if body else {}
            if doc.get("stream"):
                n = int(doc.get("n_chunks", 5000))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                frame = b"%x\r\n%s\r\n" % (len(EVENT), EVENT)
                for i in range(n):
                    writer.write(frame)
                    if i % 64 == 63:
                        await writer.drain()
                done = b"data: [DONE]\n\n"
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
                await writer.drain()
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(SMALL_REPLY), SMALL_REPLY))
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def run_engine(host: str, port: int, port_file: str) -> None:
    async def main():
        srv = await asyncio.start_server(_engine_conn, host, port)
        for s in srv.sockets:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        Path(port_file).write_text(f"{port} {os.getpid()}\n")
        async with srv:
            await srv.serve_forever()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(main())


def run_relay(host: str, port: int, upstream: int) -> None:
    """A raw asyncio TCP pipe to the engine (no HTTP at all): the floor of any Python relay
    on this machine, for the streaming comparison."""
    async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while data := await r.read(1 << 16):
                w.write(data)
                await w.drain()
        except ConnectionError:
            pass
        finally:
            w.close()

    async def conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection("127.0.0.1", upstream)
        await asyncio.gather(pipe(r, uw), pipe(ur, w))

    async def main():
        srv = await asyncio.start_server(conn, host, port)
        async with srv:
            await srv.serve_forever()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(main())


def run_fastpath(host: str, port: int, upstream: int) -> None:
    """The floor of a Python fast path for the inference routes (a prototype, not serve's
    code; ``docs/architecture.md``, the server room): an asyncio ``Protocol`` with httptools'
    parser in both directions, one pooled upstream connection, a sized answer relayed in one
    write. Per request it does what serve's hot path cannot skip: parse the JSON body for the
    model, look up precomputed per-model state, count it in flight, strip hop-by-hop headers,
    one access line through ``logging`` (to stderr), a Prometheus counter and histogram."""
    import logging

    import httptools
    from prometheus_client import CollectorRegistry, Counter, Histogram

    hop = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade", b"host",
           b"content-length", b"accept-encoding", b"proxy-connection"}
    reg = CollectorRegistry()
    route = "/v1/chat/completions"
    state = {MODEL: {"idle": [], "busy": 0,
                     "requests": Counter("r", "r", ("model", "route", "status"), registry=reg).labels(MODEL, route, "200"),
                     "seconds": Histogram("d", "d", ("model", "route"), registry=reg).labels(MODEL, route)}}
    access = logging.getLogger("fastpath.access")
    h = logging.StreamHandler()
    h.setFormatter(logging.Formatter("%(message)s %(fields)s"))
    access.addHandler(h)
    access.setLevel(logging.INFO)
    access.propagate = False

    class Up(asyncio.Protocol):
        def __init__(self) -> None:
            self.parser = httptools.HttpResponseParser(self)
            self.waiter: asyncio.Future | None = None

        def connection_made(self, t) -> None:
            self.t = t

        def on_message_begin(self) -> None:
            self.headers, self.body = [], []

        def on_header(self, k: bytes, v: bytes) -> None:
            self.headers.append((k, v))

        def on_body(self, b: bytes) -> None:
            self.body.append(b)

        def on_message_complete(self) -> None:
            w, self.waiter = self.waiter, None
            w.set_result((self.parser.get_status_code(), self.headers, b"".join(self.body)))

        def data_received(self, d: bytes) -> None:
            self.parser.feed_data(d)

    class Front(asyncio.Protocol):
        def __init__(self) -> None:
            self.parser = httptools.HttpRequestParser(self)

        def connection_made(self, t) -> None:
            self.t = t

        def on_message_begin(self) -> None:
            self.url, self.headers, self.body = b"", [], []

        def on_url(self, u: bytes) -> None:
            self.url += u

        def on_header(self, k: bytes, v: bytes) -> None:
            self.headers.append((k, v))

        def on_body(self, b: bytes) -> None:
            self.body.append(b)

        def on_message_complete(self) -> None:
            asyncio.get_running_loop().create_task(self.handle(self.parser.get_method(), self.url, self.headers,
                                                               b"".join(self.body)))

        def data_received(self, d: bytes) -> None:
            self.parser.feed_data(d)

        async def handle(self, method: bytes, url: bytes, headers: list, body: bytes) -> None:
            t0 = time.monotonic()
            model = json.loads(body).get("model")
            st = state[model]
            st["busy"] += 1
            try:
                conn = st["idle"].pop() if st["idle"] else \
                    (await asyncio.get_running_loop().create_connection(Up, "127.0.0.1", upstream))[1]
                fut = conn.waiter = asyncio.get_running_loop().create_future()
                head = [b"%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % (method, url, upstream)]
                head += [k + b": " + v + b"\r\n" for k, v in headers if k.lower() not in hop]
                conn.t.write(b"".join(head) + b"Accept-Encoding: identity\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))
                status, hdrs, data = await fut
                st["idle"].append(conn)
                out = [b"HTTP/1.1 %d OK\r\n" % status]
                out += [k + b": " + v + b"\r\n" for k, v in hdrs if k.lower() not in hop]
                self.t.write(b"".join(out) + b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
            finally:
                st["busy"] -= 1
            took = time.monotonic() - t0
            st["requests"].inc()
            st["seconds"].observe(took)
            access.info("request", extra={"fields": {"model": model, "route": route, "status": status,
                                                     "bytes": len(data), "total_ms": round(took * 1000, 2)}})

    async def main():
        srv = await asyncio.get_running_loop().create_server(Front, host, port)
        async with srv:
            await srv.serve_forever()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(main())


# -- a raw HTTP/1.1 client (blocking, keep-alive)

class Client:
    """One keep-alive connection to ``127.0.0.1:port``."""

    def __init__(self, port: int):
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def _fill(self) -> None:
        data = self.sock.recv(262144)
        if not data:
            raise ConnectionError(f"127.0.0.1:{self.port} closed the connection")
        self.buf += data

    def post(self, body: bytes, first=None) -> tuple[int, bytes]:
        """POST ``body``; returns (status, body: chunked bodies still framed). ``first`` is called when the first body byte arrives."""
        self.sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {k.strip().lower(): v.strip().lower() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        if "content-length" in hdrs:
            n = int(hdrs["content-length"])
            while len(self.buf) < n:
                self._fill()
            out, self.buf = self.buf[:n], self.buf[n:]
            if first:
                first()
            return status, out
        assert hdrs.get("transfer-encoding") == "chunked", hdrs
        # raw: the framing is left in (the SSE events contain no chunk framing, and the framing
        # no blank line), so the client costs one recv per segment, not a parse per chunk
        data = bytearray(self.buf)
        self.buf = b""
        if data and first:
            first()
            first = None
        while not (data.endswith(b"\r\n0\r\n\r\n") or data == b"0\r\n\r\n"):
            got = self.sock.recv(262144)
            if not got:
                raise ConnectionError(f"127.0.0.1:{self.port} closed the connection mid-body")
            if first:
                first()
                first = None
            data += got
        return status, bytes(data)


# -- the three targets

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} not listening on {port} after {timeout}s")


def start_lemonpack(tmp: Path, port: int, port_file: Path, profile: str | None = None) -> subprocess.Popen:
    """``python -m lemonpack.cli serve`` with a private config holding the bench recipe and model."""
    from lemonpack.runtime.models.registry import ModelRegistry

    config, cache = tmp / "config", tmp / "cache"
    backends = config / "backends"
    backends.mkdir(parents=True, mode=0o755)
    os.chmod(config, 0o755)
    cache.mkdir(mode=0o755)
    doc = {
        "recipe": RECIPE, "display_name": "Bench engine", "api_contract_version": "1",
        "capabilities": ["chat_completion"],
        "health_probe": {"type": "http", "endpoint": "/health", "expected_status": 200,
                         "timeout_seconds": 20, "poll_interval_ms": 20},
        "platforms": {"linux": {"cpu": {
            "command": sys.executable,
            "args": [str(Path(__file__).resolve()), "--engine", "--host", "{host}", "--port", "{port}",
                     "--port-file", str(port_file)],
        }}},
    }
    (backends / f"{RECIPE}.json").write_text(json.dumps(doc))
    os.chmod(backends / f"{RECIPE}.json", 0o644)
    model_file = tmp / "tiny.gguf"
    model_file.write_bytes(b"GGUF")
    ModelRegistry(config / "user_models.json").add(MODEL, RECIPE, {"main": str(model_file)})
    env = dict(os.environ, LEMONPACK_CONFIG_DIR=str(config), LEMONPACK_CACHE_DIR=str(cache))
    prof = ["-m", "cProfile", "-o", profile] if profile else []
    proc = subprocess.Popen([sys.executable, *prof, "-m", "lemonpack.cli", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(tmp / "serve.log", "wb"))
    wait_port(port, proc, "lemonpack serve")
    return proc


NGINX_CONF = """
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    keepalive_requests 1000000;
    upstream engine {{ server 127.0.0.1:{up}; keepalive 16; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
        }}
    }}
}}
"""


def start_nginx(tmp: Path, port: int, upstream: int) -> subprocess.Popen | None:
    exe = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if exe is None:
        return None
    d = tmp / "nginx"
    (d / "tmp").mkdir(parents=True)
    os.chmod(tmp, 0o755)
    os.chmod(d, 0o755)
    conf = d / "nginx.conf"
    conf.write_text(NGINX_CONF.format(d=d, up=upstream, port=port))
    proc = subprocess.Popen([exe, "-e", str(d / "error.log"), "-c", str(conf), "-p", str(d), "-g", "daemon off;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc, "nginx")
    return proc


def stop(proc: subprocess.Popen | None, sig=signal.SIGTERM) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- measurements

def latencies(ports: dict[str, int], n: int, rounds: int = 20) -> dict[str, list[float]]:
    """``n`` sequential small POSTs per target, in ``rounds`` interleaved blocks; seconds each."""
    clients = {k: Client(p) for k, p in ports.items()}
    out: dict[str, list[float]] = {k: [] for k in ports}
    try:
        for c in clients.values():  # warm-up
            for _ in range(200):
                assert c.post(SMALL_BODY)[0] == 200
        per = max(1, n // rounds)
        for _ in range(rounds):
            for k, c in clients.items():
                got = out[k]
                for _ in range(per):
                    t0 = time.perf_counter()
                    st, _body = c.post(SMALL_BODY)
                    got.append(time.perf_counter() - t0)
                    assert st == 200, (k, st)
    finally:
        for c in clients.values():
            c.close()
    return out


def stream(port: int, chunks: int) -> tuple[float, float]:
    """(time to first chunk, total) of one SSE stream of ``chunks`` events, seconds."""
    c = Client(port)
    try:
        c.post(json.dumps({"model": MODEL, "stream": True, "n_chunks": 10}).encode())  # connection warm
        body = json.dumps({"model": MODEL, "messages": [], "stream": True, "n_chunks": chunks}).encode()
        first: list[float] = []
        t0 = time.perf_counter()
        st, data = c.post(body, first=lambda: first.append(time.perf_counter()))
        total = time.perf_counter() - t0
    finally:
        c.close()
    assert st == 200 and data.count(b"\n\n") == chunks + 1, (st, data.count(b"\n\n"))
    return first[0] - t0, total


def relay_clients(port: int, chunks: int, runs: int, requests: int) -> dict[str, dict]:
    """The proxy's relay client alone, in this process, against the engine at ``port``:
    :class:`lemonpack.server.upstream.Upstream` (what the proxy uses) versus an httpx stream
    from :func:`lemonpack.httpclient.async_client` (what it would use without its own relay),
    each writing to a sink standing for the client's response. Interleaved: ``runs`` SSE
    streams of ``chunks`` events and ``requests`` small POSTs each. Per client: stream
    seconds, CPU seconds per stream, writes per stream, whether the bytes written are the
    engine's chunked body as it sent it (framing kept), small-POST seconds."""
    from multidict import CIMultiDict

    from lemonpack import httpclient
    from lemonpack.server.upstream import Upstream

    stream_body = json.dumps({"model": MODEL, "messages": [], "stream": True, "n_chunks": chunks}).encode()
    frame = b"%x\r\n%s\r\n" % (len(EVENT), EVENT)
    done = b"data: [DONE]\n\n"
    framed = frame * chunks + b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done)
    headers = {"Content-Type": "application/json"}

    async def run() -> dict[str, dict]:
        up = Upstream("127.0.0.1", port)
        hx = httpclient.async_client(timeout=30.0, trust_env=False, user_agent=None, max_connections=None)
        out: dict[str, dict] = {k: {"stream": [], "cpu": [], "writes": 0, "framed": True, "small": []}
                                for k in ("upstream", "httpx")}

        async def via_upstream(body: bytes) -> list[bytes]:
            got: list[bytes] = []

            async def write(b: bytes) -> None:
                got.append(b)
            answer, lease = await up.request("POST", "/v1/chat/completions", CIMultiDict(headers), body, None,
                                             lambda: True)
            try:
                await answer.relay(write)
            finally:
                lease.release(answer)
            return got

        async def via_httpx(body: bytes) -> list[bytes]:
            got: list[bytes] = []
            async with hx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", content=body,
                                 headers=headers) as r:
                async for b in r.aiter_raw():  # undecoded, but de-chunked by h11
                    got.append(b)
            return got

        clients = {"upstream": via_upstream, "httpx": via_httpx}
        try:
            for f in clients.values():  # warm-up
                for _ in range(50):
                    await f(SMALL_BODY)
                await f(stream_body)
            for _ in range(runs):
                for k, f in clients.items():
                    c0, t0 = time.process_time(), time.perf_counter()
                    got = await f(stream_body)
                    out[k]["stream"].append(time.perf_counter() - t0)
                    out[k]["cpu"].append(time.process_time() - c0)
                    out[k]["writes"] = max(out[k]["writes"], len(got))
                    out[k]["framed"] = out[k]["framed"] and b"".join(got) == framed
            for _ in range(requests):
                for k, f in clients.items():
                    t0 = time.perf_counter()
                    await f(SMALL_BODY)
                    out[k]["small"].append(time.perf_counter() - t0)
        finally:
            up.close()
            await hx.aclose()
        return out

    return asyncio.run(run())


def cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by process ``pid``: the time its threads ran
    (``/proc/PID/task/*/schedstat``, nanoseconds; else user + system from ``/proc/PID/stat``,
    in clock ticks of 10 ms): a figure the machine's load changes far less than wall-clock
    latency, fine enough for one stream."""
    total, seen = 0, False
    for f in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(f.read_text().split()[0])
            seen = True
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    if seen:
        return total / 1e9
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000, help="small POSTs per target (after 200 warm-up)")
    ap.add_argument("--chunks", type=int, default=5000, help="SSE events in the stream")
    ap.add_argument("--streams", type=int, default=11, help="streams per target (best and median printed)")
    ap.add_argument("--no-nginx", action="store_true")
    ap.add_argument("--profile", metavar="FILE", help="run lemonpack serve under cProfile, stats to FILE")
    ap.add_argument("--engine", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--port-file", help=argparse.SUPPRESS)
    ap.add_argument("--relay", type=int, metavar="UPSTREAM", help=argparse.SUPPRESS)
    ap.add_argument("--fastpath", type=int, metavar="UPSTREAM", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.engine:
        run_engine(a.host, a.port, a.port_file)
        return 0
    if a.relay:
        run_relay(a.host, a.port, a.relay)
        return 0
    if a.fastpath:
        run_fastpath(a.host, a.port, a.fastpath)
        return 0

    t_start = time.monotonic()
    serve = nginx = relay = fast = None
    engine_pid = None
    with tempfile.TemporaryDirectory(prefix="lp-bench-proxy-") as d:
        tmp = Path(d)
        port_file = tmp / "engine.port"
        try:
            lp_port = free_port()
            serve = start_lemonpack(tmp, lp_port, port_file, a.profile)
            c = Client(lp_port)  # the first request loads the engine
            st, body = c.post(SMALL_BODY)
            c.close()
            if st != 200:
                raise SystemExit(f"lemonpack serve answered {st}: {body[:300]!r}\n"
                                 f"{(tmp / 'serve.log').read_text()[-2000:]}")
            eng_port, engine_pid = map(int, port_file.read_text().split())
            ports = {"direct": eng_port, "lemonpack": lp_port}
            why_no_nginx = "--no-nginx given" if a.no_nginx else None
            if not a.no_nginx:
                ng_port = free_port()
                nginx = start_nginx(tmp, ng_port, eng_port)
                if nginx is None:
                    why_no_nginx = "nginx is not installed (apt-get install -y nginx)"
                else:
                    ports["nginx"] = ng_port
            rl_port = free_port()
            relay = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--host", "127.0.0.1",
                                      "--port", str(rl_port), "--relay", str(eng_port)])
            wait_port(rl_port, relay, "raw relay")
            try:
                import httptools  # noqa: F401  (the fast-path floor's parser; pyproject's test extra)
            except ImportError:
                why_no_fast = "httptools is not installed (pip install httptools)"
            else:
                why_no_fast = None
                fp_port = free_port()
                fast = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--host", "127.0.0.1",
                                         "--port", str(fp_port), "--fastpath", str(eng_port)],
                                        stderr=open(tmp / "fastpath.log", "wb"))
                wait_port(fp_port, fast, "fast-path floor")
                ports["fast path"] = fp_port
            cpu0 = cpu_seconds(serve.pid)
            fcpu0 = cpu_seconds(fast.pid) if fast else 0.0
            lat = latencies(ports, a.requests)
            cpu_lat = cpu_seconds(serve.pid) - cpu0
            fcpu_lat = cpu_seconds(fast.pid) - fcpu0 if fast else 0.0
            ports.pop("fast path", None)
            streams = {"direct": [], "lemonpack": [], "raw relay": [], **({"nginx": []} if "nginx" in ports else {})}
            ports["raw relay"] = rl_port
            cpu_stream = 0.0
            for _ in range(a.streams):  # interleaved
                for k in streams:
                    c0 = cpu_seconds(serve.pid)
                    streams[k].append(stream(ports[k], a.chunks))
                    if k == "lemonpack":
                        cpu_stream += cpu_seconds(serve.pid) - c0
            relays = relay_clients(eng_port, a.chunks, a.streams, max(100, a.requests // 4))
        finally:
            stop(nginx, signal.SIGQUIT)
            stop(relay)
            stop(fast)
            stop(serve, signal.SIGINT)
        if engine_pid is not None:
            end = time.monotonic() + 10
            while time.monotonic() < end and os.path.exists(f"/proc/{engine_pid}"):
                time.sleep(0.05)
            engine_left = os.path.exists(f"/proc/{engine_pid}") and \
                "zombie" not in Path(f"/proc/{engine_pid}/status").read_text().lower()
        else:
            engine_left = False

    from _support import ms, print_latencies, us

    p = print_latencies(lat, a.requests, pct, width=10)
    add_lp = (p["lemonpack"][0] - p["direct"][0], p["lemonpack"][1] - p["direct"][1])
    print(f"  added by lemonpack:  p50 {us(add_lp[0])}   p99 {us(add_lp[1])}")
    ok_lat = add_lp[0] <= 0.001
    if "nginx" in p:
        add_ng = (p["nginx"][0] - p["direct"][0], p["nginx"][1] - p["direct"][1])
        print(f"  added by nginx:      p50 {us(add_ng[0])}   p99 {us(add_ng[1])}")
        if add_ng[0] > 0:
            print(f"  lemonpack added / nginx added: p50 {add_lp[0] / add_ng[0]:.1f}x"
                  + (f", p99 {add_lp[1] / add_ng[1]:.1f}x" if add_ng[1] > 0 else ""))
    else:
        print(f"  nginx anchor skipped: {why_no_nginx}")
    print(f"  lemonpack serve CPU per request: {cpu_lat / (a.requests + 200) * 1e6:.0f} us "
          "(user+system, whole process; the load-independent figure)")
    if "fast path" in p:
        add_fp = p["fast path"][0] - p["direct"][0]
        print(f"  fast-path floor (asyncio Protocol + httptools, not serve; --fastpath): added p50 {us(add_fp)}, "
              f"CPU per request {fcpu_lat / (a.requests + 200) * 1e6:.0f} us"
              + (f", {add_fp / (p['nginx'][0] - p['direct'][0]):.1f}x nginx's added"
                 if "nginx" in p and p["nginx"][0] > p["direct"][0] else ""))
    else:
        print(f"  fast-path floor skipped: {why_no_fast}")
    print(f"SSE stream of {a.chunks} chunks ({a.streams} runs each, best | median):")
    best = {}
    for k, v in streams.items():
        ttfc = [x[0] for x in v]
        tot = [x[1] for x in v]
        best[k] = min(tot)
        print(f"  {k:10s} first chunk {ms(min(ttfc))} | {ms(statistics.median(ttfc))}   "
              f"total {ms(min(tot))} | {ms(statistics.median(tot))}   "
              f"({a.chunks / min(tot):,.0f} chunks/s best)")
    best_ratio = best["direct"] / best["lemonpack"]
    # each direct stream is paired with the lemonpack stream run right after it (same machine state)
    ratio = statistics.median(d[1] / lp[1] for d, lp in zip(streams["direct"], streams["lemonpack"]))
    ok_stream = ratio >= 0.9
    print(f"  lemonpack serve CPU per stream: {cpu_stream / a.streams * 1e3:.1f} ms "
          f"({cpu_stream / a.streams / a.chunks * 1e6:.2f} us per event)")
    print(f"  throughput through lemonpack / direct: {ratio:.2f}x (median of {a.streams} interleaved pairs), "
          f"{best_ratio:.2f}x best vs best")
    for k in ("raw relay", "nginx"):
        if k in streams:
            r = statistics.median(d[1] / x[1] for d, x in zip(streams["direct"], streams[k]))
            print(f"  throughput through {k} / direct: {r:.2f}x (median), {best['direct'] / best[k]:.2f}x best vs best")
    print(f"relay client alone (in this process, same engine, {a.streams} interleaved streams of {a.chunks} "
          "events, then small POSTs): lemonpack.server.upstream vs an httpx stream (lemonpack.httpclient):")
    for k, r in relays.items():
        print(f"  {k:9s} stream best {ms(min(r['stream']))} | median {ms(statistics.median(r['stream']))}   "
              f"CPU {ms(statistics.median(r['cpu']))}/stream   writes/stream {r['writes']:5d}   "
              f"framing passed on: {'yes' if r['framed'] else 'no'}   small POST p50 {us(pct(r['small'], 50))}")
    up_r, hx_r = relays["upstream"], relays["httpx"]
    print(f"  httpx / upstream: stream {statistics.median(hx_r['stream']) / statistics.median(up_r['stream']):.2f}x "
          f"(median), CPU {statistics.median(hx_r['cpu']) / statistics.median(up_r['cpu']):.2f}x, "
          f"small POST p50 {pct(hx_r['small'], 50) / pct(up_r['small'], 50):.2f}x")
    print("targets:")
    print(f"  added p50 <= 1 ms:              {'met' if ok_lat else 'MISSED'} ({add_lp[0] * 1e3:.3f} ms)")
    print(f"  streaming >= 0.9x direct:       {'met' if ok_stream else 'MISSED'} ({ratio:.2f}x)")
    if "nginx" in p and p["nginx"][0] > p["direct"][0]:
        r = add_lp[0] / (p["nginx"][0] - p["direct"][0])
        print(f"  added p50 <= 2x nginx's:        {'met' if r <= 2 else 'MISSED'} ({r:.1f}x)")
    print(f"stopped: lemonpack serve, {'nginx, ' if nginx else ''}engine "
          f"{'STILL RUNNING (pid %d)' % engine_pid if engine_left else 'gone'}; "
          f"run took {time.monotonic() - t_start:.1f} s")
    return 0 if not engine_left else 1


if __name__ == "__main__":
    if {"--engine", "--relay", "--fastpath"} & set(sys.argv) or {"-h", "--help"} & set(sys.argv):
        sys.exit(main())  # a helper process of the bench, or its usage: nothing to record
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _support import run_recorded

    sys.exit(run_recorded("proxy", main))
