"""Gateway model with two endpoints (two engines serve does not spawn). One endpoint hangs
(SIGSTOP: its kernel still accepts connections, it never answers). serve's probe marks it
down ("timed out") within seconds, and new requests go to the other one; but the requests
already relayed to the hung endpoint are never answered, failed over or timed out: they hang
until the client gives up (there is no upstream timeout to set)."""
import os, signal, subprocess, sys, threading, time, json, urllib.request
from support import trial_harness as rh
from support.trial_harness import Serve, post, verdict
HERE = rh.HERE  # tests/support: the fake engine and the recipe writer
ports = [rh.free_port(), rh.free_port()]
ups = [subprocess.Popen([sys.executable, f"{HERE}/trial_engine.py", "--port", str(p), "--chunks", "3"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for p in ports]
def _kill():
    for u in ups:
        try:
            os.kill(u.pid, signal.SIGCONT); u.kill(); u.wait()
        except OSError:
            pass
import atexit; atexit.register(_kill)
s = Serve({}, args=["--no-engine-output"])
subprocess.run([sys.executable, f"{HERE}/trial_recipe.py", f"{s.root}/backends", "fe-gw"], check=True,
               env=dict(os.environ, PROBE_TIMEOUT="2"))
subprocess.run(["lemonpack", "models", "add", "user.gw", "-r", "fe-gw", "-e", f"http://127.0.0.1:{ports[0]}",
                "-e", f"http://127.0.0.1:{ports[1]}"], env=s.env, check=True, capture_output=True)
s.start()
t0 = time.time()
while time.time() - t0 < 15 and post(s.url + "/v1/chat/completions", {"model": "user.gw", "messages": []}, timeout=5)[0] != 200:
    time.sleep(0.3)
os.kill(ups[1].pid, signal.SIGSTOP)
results = []
def one():
    t = time.time()
    try:
        st = post(s.url + "/v1/chat/completions", {"model": "user.gw", "messages": []}, timeout=25)[0]
    except Exception as e:
        st = type(e).__name__
    results.append((st, round(time.time() - t, 1)))
ths = [threading.Thread(target=one) for _ in range(6)]
for t in ths: t.start()
for t in ths: t.join()
eps = json.loads(urllib.request.urlopen(s.url + "/v1/models").read())["data"][0]["endpoints"]
hung = [r for r in results if not isinstance(r[0], int)]
print(f"6 requests with one endpoint SIGSTOPped: {results}; endpoints now: {[(e['url'][-5:], e['state'], e['reason']) for e in eps]}")
verdict(not hung, f"{len(hung)} of 6 requests relayed to the hung endpoint got no answer in 25 s, though serve's probe had marked it down")
