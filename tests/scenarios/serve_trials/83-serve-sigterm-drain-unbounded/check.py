"""serve gets SIGTERM, then SIGINT (Ctrl-C twice) while one long stream (75 s) is in flight:
it must stop within 20 s of the second signal, its engine gone. Today it keeps relaying the
stream until the stream ends, whatever signals come (no drain deadline, second signal ignored)."""
import signal, threading, time, urllib.request, json
from support.trial_harness import Serve, verdict
s = Serve({"user.a": ("fe-a", ["--chunks", "1500", "--chunk-delay", "0.05"], 1 << 20)}, args=["--no-engine-output"]).start()
events = [0]
def client():
    req = urllib.request.Request(s.url + "/v1/chat/completions", data=json.dumps(
        {"model": "user.a", "messages": [], "stream": True}).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=90) as r:
            for line in r:
                events[0] += 1
    except Exception:
        pass
t = threading.Thread(target=client, daemon=True); t.start()
time.sleep(2)
s.proc.send_signal(signal.SIGTERM); time.sleep(2)
s.proc.send_signal(signal.SIGINT); t2 = time.time()
while s.proc.poll() is None and time.time() - t2 < 20:
    time.sleep(0.2)
exited = s.proc.poll() is not None
waited = round(time.time() - t2, 1)
left = s.engine_pids()
print(f"stream events relayed so far: {events[0]}; serve exited: {exited} ({waited} s after 2nd signal); engines left: {left}")
verdict(exited and not left, f"serve still running {waited} s after SIGTERM + SIGINT with one stream in flight (drain has no deadline; second signal ignored)")
