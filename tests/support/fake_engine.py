"""A fake OpenAI-compatible engine for runtime tests (stdlib only; run it as a script).

    python fake_engine.py --port P [--host H] [--health-delay S] [--health-503 N] [--crash-after S]
        [--crash-after-ready S]
        [--exit-code N] [--exit-now] [--ignore-sigterm] [--fork-child] [--grandchild]
        [--pid-file F] [--no-listen] [--chunks N] [--chunk-delay S] [--die-mid-stream]
        [--record F] [--first-byte-delay S] [--health-gate F] [--first-byte-gate F] [--hold-stream F]
        [--chunked] [--frame-size N] [--no-model-field]

- ``/health``: 503 ``{"status": "loading model"}`` for ``--health-delay`` seconds, then 200;
  ``--health-503 N``: the first N answers are 503, whatever the time (a test that asserts
  the 503s does not depend on how fast a loaded machine starts the engine).
- ``--health-gate F``: ``/health`` is 503 until the file F exists (a test decides when the
  engine becomes ready, however fast or slow the machine is).
- ``/v1/models``, ``/v1/chat/completions`` (plain, and SSE with ``"stream": true``:
  ``data: {...}`` lines ending ``data: [DONE]``).
- ``--crash-after S``: exit with ``--exit-code`` (default 3) S seconds after start;
  ``--crash-after-ready S``: S seconds after its first ``/health`` 200 (after ready, however
  long a loaded machine took to get there);
  ``--exit-now``: print a message and exit with ``--exit-code`` at once (after making the
  children asked for, which are left behind).
- ``--ignore-sigterm``: SIGTERM is ignored (by the engine and the children it makes).
- ``--fork-child``: fork a child that stays in our process group and sleeps.
- ``--grandchild``: fork a child that forks a grandchild which ``setsid``s away and sleeps,
  then the child exits (the grandchild is orphaned, outside our group and session);
  ``--grandchild-mib N``: the grandchild first touches N MiB (its exit then takes a while:
  the kernel frees its memory after its environment is gone, before it is a zombie).
- ``--chunks N`` / ``--chunk-delay S``: a streamed chat answer is N chunks (default: one
  per word) with S seconds between them; ``--die-mid-stream``: exit (code 5) after 2 chunks.
- ``--chunked``: a streamed answer is sent with chunked framing (as llama-server does; default:
  delimited by the close of the connection), one chunk per event, or chunks of at most
  ``--frame-size N`` bytes (an event's bytes cut by the framing); ``--no-model-field``: its
  events carry no ``model`` member.
- ``--record F``: append one JSON line per event: ``{"event": "disconnect", "t": time.time()}``
  when a client went away mid-stream, ``{"event": "request", ...}`` for each POST (before any
  delay or gate), ``{"event": "stream-end"}`` when a streamed answer was sent whole.
- ``--first-byte-delay S``: every POST waits S seconds before sending anything;
  ``--first-byte-gate F``: every POST waits until the file F exists before sending anything.
- ``--hold-stream F``: a streamed chat answer sends its first chunk, then holds the rest until
  the file F exists; a client closing the connection meanwhile is seen at once (end of file
  on the socket, no write needed) and recorded as ``disconnect``.
- Any other POST path echoes ``{"path", "query", "headers": [[k, v]...], "body_b64"}``.
- ``--pid-file F``: write one line per process: ``engine PID``, ``child PID``, ``grandchild PID``.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import signal
import sys
import threading
import time

START = time.monotonic()
HEALTH_ASKED = [0]  # /health requests so far
CRASH_ARMED = [False]  # --crash-after-ready: the timer started
HEALTH_LOCK = threading.Lock()


def log(msg: str) -> None:
    print(f"fake-engine[{os.getpid()}]: {msg}", flush=True)


def sleeper(ignore_term: bool) -> None:
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(3600)


def record(path: str | None, role: str, pid: int) -> None:
    if path:
        with open(path, "a") as f:
            f.write(f"{role} {pid}\n")


def crash(code: int) -> None:
    log(f"crashing with code {code}")
    os._exit(code)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    opts: argparse.Namespace

    def log_message(self, fmt, *args):  # noqa: D401
        pass

    def _json(self, code: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        if self.path == "/health":
            with HEALTH_LOCK:
                HEALTH_ASKED[0] += 1
                early = HEALTH_ASKED[0] <= self.opts.health_503
            gated = self.opts.health_gate is not None and not os.path.exists(self.opts.health_gate)
            if early or gated or time.monotonic() - START < self.opts.health_delay:
                self._json(503, {"error": {"code": 503, "message": "Loading model"}})
            else:
                with HEALTH_LOCK:
                    arm = self.opts.crash_after_ready is not None and not CRASH_ARMED[0]
                    CRASH_ARMED[0] = CRASH_ARMED[0] or arm
                if arm:
                    threading.Timer(self.opts.crash_after_ready, crash, args=(self.opts.exit_code,)).start()
                self._json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.opts.model, "object": "model"}]})
        else:
            self._json(404, {"error": "not found"})

    def _record(self, **event) -> None:
        if self.opts.record:
            with open(self.opts.record, "a") as f:
                f.write(json.dumps({"t": time.time(), **event}) + "\n")

    def _hold(self, gate: str) -> bool:
        """Wait until the file ``gate`` exists (True) or the client closed the connection (False)."""
        import select
        import socket

        while not os.path.exists(gate):
            readable, _, _ = select.select([self.connection], [], [], 0.01)
            if readable:
                try:
                    if not self.connection.recv(1, socket.MSG_PEEK):
                        return False
                except OSError:
                    return False
                time.sleep(0.01)  # bytes we do not read (a pipelined request): keep waiting
        return True

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        self._record(event="request", path=self.path, headers=list(self.headers.items()))
        if self.opts.first_byte_delay:
            time.sleep(self.opts.first_byte_delay)
        if self.opts.first_byte_gate is not None:
            while not os.path.exists(self.opts.first_byte_gate):
                time.sleep(0.01)
        if self.path.split("?")[0] != "/v1/chat/completions":
            import base64
            path, _, query = self.path.partition("?")
            self._json(200, {"path": path, "query": query, "headers": list(self.headers.items()),
                             "body_b64": base64.b64encode(raw).decode()})
            return
        req = json.loads(raw or b"{}")
        text = "Hello from the fake engine"
        if not req.get("stream"):
            self._json(200, {"id": "chatcmpl-fake", "object": "chat.completion", "model": self.opts.model,
                             "system_fingerprint": self.opts.model,
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": text}}]})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if self.opts.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        write = self.wfile.write
        if self.opts.chunked:
            def write(data: bytes) -> None:
                step = self.opts.frame_size or len(data)
                self.wfile.write(b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + step]), data[i:i + step])
                                          for i in range(0, len(data), step)))
        words = text.split(" ") if self.opts.chunks is None else [f"w{i}" for i in range(self.opts.chunks)]
        try:
            for i, word in enumerate(words):
                if i and self.opts.chunk_delay:
                    time.sleep(self.opts.chunk_delay)
                if i == 2 and self.opts.die_mid_stream:
                    log("dying mid-stream")
                    os._exit(5)
                chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": self.opts.model,
                         "system_fingerprint": self.opts.model,
                         "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]}
                if self.opts.no_model_field:
                    del chunk["model"], chunk["system_fingerprint"]
                write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                if i == 0 and self.opts.hold_stream is not None and not self._hold(self.opts.hold_stream):
                    self._record(event="disconnect")
                    break
            else:
                write(b"data: [DONE]\n\n")
                if self.opts.chunked:
                    self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                self._record(event="stream-end")
        except (BrokenPipeError, ConnectionResetError):
            self._record(event="disconnect")
        self.close_connection = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--health-delay", type=float, default=0.0)
    ap.add_argument("--health-503", type=int, default=0)
    ap.add_argument("--crash-after", type=float, default=None)
    ap.add_argument("--crash-after-ready", type=float, default=None)
    ap.add_argument("--exit-code", type=int, default=3)
    ap.add_argument("--exit-now", action="store_true")
    ap.add_argument("--ignore-sigterm", action="store_true")
    ap.add_argument("--fork-child", action="store_true")
    ap.add_argument("--grandchild", action="store_true")
    ap.add_argument("--grandchild-mib", type=int, default=0)
    ap.add_argument("--pid-file")
    ap.add_argument("--chunks", type=int, default=None)
    ap.add_argument("--chunk-delay", type=float, default=0.0)
    ap.add_argument("--die-mid-stream", action="store_true")
    ap.add_argument("--chunked", action="store_true")
    ap.add_argument("--frame-size", type=int, default=0)
    ap.add_argument("--no-model-field", action="store_true")
    ap.add_argument("--record")
    ap.add_argument("--first-byte-delay", type=float, default=0.0)
    ap.add_argument("--health-gate", default=None)
    ap.add_argument("--first-byte-gate", default=None)
    ap.add_argument("--hold-stream", default=None)
    ap.add_argument("--no-listen", action="store_true")
    ap.add_argument("--ctx-size", default=None)  # accepted (a recipe's literal -c/--ctx-size), unused
    opts = ap.parse_args(argv)
    record(opts.pid_file, "engine", os.getpid())
    if opts.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if opts.fork_child:
        pid = os.fork()
        if pid == 0:
            sleeper(opts.ignore_sigterm)
        record(opts.pid_file, "child", pid)
    if opts.grandchild:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            gpid = os.fork()
            if gpid == 0:
                os.setsid()
                ballast = bytearray(opts.grandchild_mib << 20)
                ballast[::4096] = b"x" * len(ballast[::4096])
                for fd in (0, 1, 2):  # a daemon-like grandchild: away from our pipes too
                    os.dup2(os.open(os.devnull, os.O_RDWR), fd)
                sleeper(opts.ignore_sigterm)
            os.write(w, f"{gpid}\n".encode())
            os._exit(0)
        os.close(w)
        gpid = int(os.read(r, 64).decode().strip())
        os.waitpid(pid, 0)
        record(opts.pid_file, "grandchild", gpid)
    if opts.exit_now:  # after the forks: children and grandchildren are left behind
        log(f"cannot load model: giving up with code {opts.exit_code}")
        return opts.exit_code
    if opts.crash_after is not None:
        threading.Timer(opts.crash_after, crash, args=(opts.exit_code,)).start()
    if opts.no_listen:
        log("running without a port")
        sleeper(opts.ignore_sigterm)
    Handler.opts = opts
    srv = http.server.ThreadingHTTPServer((opts.host, opts.port), Handler)
    srv.daemon_threads = True
    log(f"listening on http://{opts.host}:{opts.port} (health 503 for {opts.health_delay}s)")
    if not opts.ignore_sigterm:
        signal.signal(signal.SIGTERM, lambda *_: (log("SIGTERM: bye"), os._exit(0)))
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
