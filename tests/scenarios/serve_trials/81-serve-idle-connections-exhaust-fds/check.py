"""serve started with the common default soft limit of 1024 open files (`ulimit -n`, Debian's
default). 1,100 TCP connections that send nothing are opened (a port scanner, a stuck client
pool, a slowloris). serve has no idle timeout for a connection that never sends a request,
no connection cap, and does not raise its soft limit to the hard one: it runs out of file
descriptors, a normal request hangs, the log floods with "Too many open files" tracebacks, and
the discovery watcher, unable to list the recipes directory, unloads the running model as
"gone" (the next request for a registered model is a 404)."""
import resource, socket, time
from support.trial_harness import Serve, post, verdict
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard != resource.RLIM_INFINITY and hard < 2500:
    print(f"hard open-files limit {hard} too low for this check"); verdict(False, "environment: hard NOFILE < 2500")
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))     # what serve inherits: the usual default
s = Serve({"user.a": ("fe-a", [], 1 << 20)}, args=["--no-engine-output"]).start()
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))     # this client needs more than serve has
assert post(s.url + "/v1/chat/completions", {"model": "user.a", "messages": []})[0] == 200
conns = [socket.create_connection(("127.0.0.1", s.port), timeout=5) for _ in range(1100)]
time.sleep(1)
t = time.time()
try:
    st, body = post(s.url + "/v1/chat/completions", {"model": "user.a", "messages": []}, timeout=20)
except Exception as e:
    st, body = type(e).__name__, b""
took = round(time.time() - t, 1)
for c in conns:
    c.close()
time.sleep(1.5)
st2, _ = post(s.url + "/v1/chat/completions", {"model": "user.a", "messages": []}, timeout=20)
log = s.log()
emfile = log.count("Too many open files")
gone = "is gone; unloading" in log
print(f"request with 1,100 idle connections open: {st} after {took} s; 'Too many open files' in log: {emfile} times "
      f"({len(log) >> 10} KiB of log); model unloaded as gone: {gone}; request after they closed: {st2}")
verdict(st == 200 and not gone,
        f"1,100 idle TCP connections (serve at ulimit -n 1024): a request got {st} after {took} s, "
        f"{emfile} EMFILE errors logged, running model unloaded as gone: {gone}")
