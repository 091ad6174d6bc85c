#!/usr/bin/env python3
"""Tiny OpenAI-compatible fake engine (stdlib). Flags:
--port P --host H --model M --chunks N --chunk-delay S --health-delay S --never-healthy
--exit-now (exit 3 at start) --alloc-mib N --first-byte-delay S --chunked --pidfile F --die-after-chunks N
"""
import argparse, http.server, json, os, socketserver, sys, time
ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True); ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--model", default="fake"); ap.add_argument("--chunks", type=int, default=5)
ap.add_argument("--chunk-delay", type=float, default=0.0); ap.add_argument("--health-delay", type=float, default=0.0)
ap.add_argument("--never-healthy", action="store_true"); ap.add_argument("--exit-now", action="store_true")
ap.add_argument("--alloc-mib", type=int, default=0); ap.add_argument("--first-byte-delay", type=float, default=0.0)
ap.add_argument("--chunked", action="store_true"); ap.add_argument("--pidfile", default=None)
ap.add_argument("--die-after-chunks", type=int, default=-1)
ap.add_argument("--ctx", default=None); ap.add_argument("rest", nargs="*")
o, _unknown = ap.parse_known_args()
START = time.monotonic()
if o.pidfile:
    with open(o.pidfile, "a") as f: f.write(f"{os.getpid()}\n")
if o.exit_now:
    print("fe: crashing at start", flush=True); sys.exit(3)
if o.alloc_mib:
    BLOB = bytearray(o.alloc_mib << 20)
    for i in range(0, len(BLOB), 4096): BLOB[i] = 1
print(f"fe[{os.getpid()}]: {o.model} on {o.host}:{o.port}", flush=True)

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def _json(self, code, obj):
        b = json.dumps(obj).encode()
        self.send_response(code); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self):
        if self.path == "/health":
            if o.never_healthy or time.monotonic() - START < o.health_delay:
                return self._json(503, {"error": {"code": 503, "message": "Loading model"}})
            return self._json(200, {"status": "ok"})
        if self.path == "/v1/models":
            return self._json(200, {"object": "list", "data": [{"id": o.model, "object": "model"}]})
        self._json(404, {"error": "nf"})
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        try: req = json.loads(raw or b"{}")
        except Exception: return self._json(400, {"error": {"message": "bad json", "type": "invalid_request_error"}})
        if o.first_byte_delay: time.sleep(o.first_byte_delay)
        p = self.path.split("?")[0]
        chat = p.endswith("/chat/completions")
        if not p.endswith("/completions"):
            return self._json(200, {"path": p, "len": n})
        obj = "chat.completion" if chat else "text_completion"
        if not req.get("stream"):
            ch = {"index": 0, "finish_reason": "stop"}
            if chat: ch["message"] = {"role": "assistant", "content": "hello " * o.chunks}
            else: ch["text"] = "hello " * o.chunks
            return self._json(200, {"id": "x1", "object": obj, "created": 1, "model": o.model, "choices": [ch],
                                    "usage": {"prompt_tokens": 1, "completion_tokens": o.chunks, "total_tokens": 1 + o.chunks}})
        self.send_response(200); self.send_header("Content-Type", "text/event-stream")
        if o.chunked: self.send_header("Transfer-Encoding", "chunked")
        else: self.send_header("Connection", "close")
        self.end_headers()
        def w(data):
            if o.chunked: data = b"%x\r\n%s\r\n" % (len(data), data)
            self.wfile.write(data); self.wfile.flush()
        try:
            for i in range(o.chunks):
                if i and o.chunk_delay: time.sleep(o.chunk_delay)
                if i == o.die_after_chunks: os._exit(9)
                ch = {"index": 0, "finish_reason": "stop" if i == o.chunks - 1 else None}
                if chat: ch["delta"] = {"content": f"t{i} "}
                else: ch["text"] = f"t{i} "
                w(f"data: {json.dumps({'id': 'x1', 'object': obj + '.chunk', 'created': 1, 'model': o.model, 'choices': [ch]})}\n\n".encode())
            w(b"data: [DONE]\n\n")
            if o.chunked: self.wfile.write(b"0\r\n\r\n"); self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        if not o.chunked: self.close_connection = True

class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True; allow_reuse_address = True
S((o.host, o.port), H).serve_forever()
