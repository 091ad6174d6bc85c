"""Reproducer harness of the serve trials (tests/scenarios/serve_trials/, from the trials' cases 78-85): a
private `lemonpack serve` over trial_engine.py fake engines (recipes by trial_recipe.py), cleaned up at exit."""
import atexit, json, os, random, shutil, signal, socket, subprocess, sys, tempfile, time, urllib.request

from support.interrupt import popen_interruptible

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = tempfile.mkdtemp(prefix="lp-serve-repro-")
_serves = []

def free_port():
    for _ in range(200):
        p = random.randint(20000, 20999)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p)); return p
            except OSError:
                continue
    raise RuntimeError("no free port in 20000-20999")

def alive(pid):
    try:
        return open(f"/proc/{pid}/stat").read().split()[2] != "Z"
    except OSError:
        return False

class Serve:
    def __init__(self, models, args=(), serves_glob=None, probe_timeout=20):
        """models: {name: (recipe, [fe flags], size_bytes)}"""
        self.root = tempfile.mkdtemp(dir=ROOT)
        self.port = free_port()
        self.env = dict(os.environ, HOME=f"{self.root}/home", LEMONPACK_CONFIG_DIR=f"{self.root}/cfg",
                        LEMONPACK_CACHE_DIR=f"{self.root}/cache", LEMONPACK_BACKENDS_PATH=f"{self.root}/backends")
        for d in ("home", "cfg", "cache", "backends"):
            os.makedirs(f"{self.root}/{d}")
        self.pidfile = f"{self.root}/pids"
        done = set()
        for name, (recipe, flags, size) in models.items():
            if recipe not in done:
                env = dict(os.environ, PROBE_TIMEOUT=str(probe_timeout))
                if serves_glob: env["SERVES"] = serves_glob
                subprocess.run([sys.executable, f"{HERE}/trial_recipe.py", f"{self.root}/backends", recipe,
                                "--pidfile", self.pidfile, *flags], check=True, env=env)
                done.add(recipe)
            mf = f"{self.root}/{name}.bin"
            with open(mf, "wb") as f:
                f.truncate(size or 1024)
            subprocess.run(["lemonpack", "models", "add", name, "-r", recipe, "-c", f"main={mf}"], env=self.env,
                           check=True, capture_output=True)
        self.args = list(args)
        self.proc = None
        _serves.append(self)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self):
        self.errf = open(f"{self.root}/serve.log", "w")
        # SIGINT may arrive ignored (a background job inherits it so): serve gets the default
        self.proc = popen_interruptible(["lemonpack", "serve", "--port", str(self.port), *self.args], env=self.env,
                                        stdout=self.errf, stderr=subprocess.STDOUT)
        t = time.time()
        while time.time() - t < 30:
            try:
                urllib.request.urlopen(f"{self.url}/v1/health", timeout=2).read(); return self
            except Exception:
                if self.proc.poll() is not None: break
                time.sleep(0.2)
        raise RuntimeError("serve did not come up:\n" + self.log())

    def engine_pids(self):
        try:
            pids = [int(x) for x in open(self.pidfile).read().split()]
        except OSError:
            return []
        return [p for p in pids if alive(p)]

    def log(self):
        try:
            return open(f"{self.root}/serve.log", errors="replace").read()
        except OSError:
            return ""

    def stop(self, timeout=20):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill(); self.proc.wait()
        for p in self.engine_pids():
            try:
                os.kill(p, signal.SIGCONT); os.kill(p, signal.SIGKILL)
            except OSError:
                pass

def _cleanup():
    for s in _serves:
        try:
            s.stop(5)
        except Exception:
            pass
    shutil.rmtree(ROOT, ignore_errors=True)
atexit.register(_cleanup)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))

def post(url, body, timeout=30, raw=None, headers=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers=headers or {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()

def verdict(ok, what):
    print("PASS" if ok else f"FAIL: {what}")
    sys.exit(0 if ok else 1)
