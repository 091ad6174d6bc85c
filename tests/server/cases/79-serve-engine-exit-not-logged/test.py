"""A ready, idle engine dies (SIGKILL, as the OOM killer does). serve notices (GET /v1/models
says "failed: engine exited with code -9", /metrics counts reason="exited"), but its log, the
operator's view, has no line about it: it must log one (model and exit status)."""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_evening"))  # rh, fe, mkrecipe
import os, signal, time, json, urllib.request
from rh import Serve, post, verdict
s = Serve({"user.a": ("fe-a", [], 1 << 20)}, args=[]).start()
post(s.url + "/v1/chat/completions", {"model": "user.a", "messages": []})
pid = s.engine_pids()[0]
before = len(s.log().splitlines())
os.kill(pid, signal.SIGKILL)
time.sleep(3)
state = [(m["id"], m.get("state"), m.get("reason")) for m in json.loads(urllib.request.urlopen(s.url + "/v1/models").read())["data"]]
new = s.log().splitlines()[before:]
hit = [l for l in new if "user.a" in l and any(w in l.lower() for w in ("exit", "-9", "kill", "died", "crash", "signal"))]
print(f"/v1/models: {state}; serve log lines since the kill: {new}")
verdict(bool(hit), f"engine of user.a killed (-9): /v1/models shows it ({state[0][1]}) but serve's log has no line about it")
