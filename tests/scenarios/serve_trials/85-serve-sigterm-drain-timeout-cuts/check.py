"""Bounded shutdown (issue 27, point 4), beside case 83: with --drain-timeout 1, SIGTERM lets a
short stream finish (exit 0) but cuts a long one after 1 s: the client sees `event: error` and
an unterminated body, serve exits 1 within a few seconds, its engine gone."""
import http.client, json, signal, threading, time
from support.trial_harness import Serve, verdict


def stream(s, out):
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    c.request("POST", "/v1/chat/completions", body=json.dumps({"model": "user.a", "messages": [], "stream": True}),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    lines = []
    try:
        for line in r:
            lines.append(line.strip())
    except http.client.IncompleteRead:
        out["incomplete"] = True
    out["lines"] = lines


def run(chunks):
    s = Serve({"user.a": ("fe-a", ["--chunks", str(chunks), "--chunk-delay", "0.05", "--chunked"], 1 << 20)},
              args=["--no-engine-output", "--drain-timeout", "1"]).start()
    out = {}
    t = threading.Thread(target=stream, args=(s, out), daemon=True)
    t.start()
    time.sleep(1.0)
    s.proc.send_signal(signal.SIGTERM)
    t0 = time.time()
    try:
        code = s.proc.wait(15)
    except Exception:
        code = None
    t.join(5)
    return s, out, code, round(time.time() - t0, 1)


s, out, code, took = run(30)  # 1.5 s in all: finishes within the drain
short_ok = code == 0 and out.get("lines", [b""])[-2:] in ([b"data: [DONE]", b""], [b"", b"data: [DONE]"]) \
    or (code == 0 and b"data: [DONE]" in out.get("lines", []))
s2, out2, code2, took2 = run(2000)  # 100 s: cut at the drain timeout
lines = out2.get("lines", [])
cut_ok = code2 == 1 and b"event: error" in lines and b"data: [DONE]" not in lines and took2 < 6 \
    and not s2.engine_pids()
print(f"short stream: exit {code} after {took} s, last {out.get('lines', [])[-2:]}; long stream: exit {code2} "
      f"after {took2} s, error event {b'event: error' in lines}, incomplete body {out2.get('incomplete')}")
verdict(short_ok and cut_ok, "SIGTERM did not drain the short stream (exit 0) and cut the long one at --drain-timeout "
        "(exit 1, event: error)")
