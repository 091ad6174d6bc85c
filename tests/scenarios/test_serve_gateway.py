"""``lemonpack serve`` as a gateway: endpoint models served by fake engines lemonpack does not
spawn, real processes and real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import httpx
import pytest

from support.helpers import free_port, wait_for
from support.recipes import FAKE_ENGINE, recipe_doc, write_recipe

CHAT = {"model": "user.gw", "messages": [{"role": "user", "content": "hi"}]}


class Engine:
    """A fake engine started by the test (not by lemonpack) on a fixed port."""

    def __init__(self, name: str, *flags: str, port: int | None = None, tmp=None):
        self.name, self.flags, self.port = name, flags, port or free_port()
        self.record = tmp / f"{name}.jsonl" if tmp is not None else None
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self) -> "Engine":
        argv = [sys.executable, str(FAKE_ENGINE), "--port", str(self.port), "--model", self.name, *self.flags]
        if self.record is not None:
            argv += ["--record", str(self.record)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_for(self._up, 10), f"{self.name} did not start"
        return self

    def _up(self) -> bool:
        try:
            return httpx.get(self.url + "/health", timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def posts(self) -> int:
        if self.record is None or not self.record.exists():
            return 0
        return sum(1 for line in self.record.read_text().splitlines() if json.loads(line)["event"] == "request")


@pytest.fixture
def engines(tmp_path):
    made: list[Engine] = []

    def make(name: str, *flags: str, port: int | None = None) -> Engine:
        e = Engine(name, *flags, port=port, tmp=tmp_path)
        made.append(e)
        return e.start()

    yield make
    for e in made:
        if e.proc is not None and e.proc.poll() is None:
            e.kill()


def gateway(live, *urls, capabilities=("chat_completion",), poll_ms: int = 20, **config):
    lv = live(**config)
    doc = recipe_doc("gw-engine", fake_engine=[], capabilities=capabilities)
    doc["health_probe"]["poll_interval_ms"] = poll_ms
    write_recipe(lv.backends / "gw-engine.json", doc)
    lv.registry.add("user.gw", "gw-engine", {}, endpoints=list(urls))
    return lv.start()


def who(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    return r.json()["system_fingerprint"]  # the engine's own name ("model" is the name asked for)


def endpoint_states(c) -> dict[str, str]:
    m = next(d for d in c.get("/v1/models").json()["data"] if d["id"] == "user.gw")
    return {e["url"]: e["state"] for e in m["endpoints"]}


def all_up(c, *engines) -> None:
    """Wait until every endpoint passed its first probe (the model is ready with the first)."""
    assert wait_for(lambda: endpoint_states(c) == {e.url: "up" for e in engines}, 10)


def test_one_model_two_engines_least_in_flight(live, engines):
    a = engines("eng-a", "--chunks", "40", "--chunk-delay", "0.05")
    b = engines("eng-b", "--chunks", "40", "--chunk-delay", "0.05")
    lv = gateway(live, a.url, b.url)
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        all_up(c, a, b)
        # idle: ties go round the endpoints, in a fixed order
        assert [who(c.post("/v1/chat/completions", json=CHAT)) for _ in range(4)] == ["eng-a", "eng-b"] * 2
        # a long stream holds eng-a: everything else goes to the endpoint with fewer in flight
        started, done = threading.Event(), []

        def stream():
            with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as s:
                with s.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: {"):
                            done.append(json.loads(line[6:])["system_fingerprint"])
                            started.set()

        t = threading.Thread(target=stream)
        t.start()
        assert started.wait(10)
        assert [who(c.post("/v1/chat/completions", json=CHAT)) for _ in range(5)] == ["eng-b"] * 5
        metrics = c.get("/metrics").text
        assert f'lemonpack_endpoint_inflight_requests{{endpoint="{a.url}",model="user.gw"}} 1.0' in metrics
        assert f'lemonpack_endpoint_up{{endpoint="{b.url}",model="user.gw"}} 1.0' in metrics
        assert 'lemonpack_inflight_requests{model="user.gw"} 1.0' in metrics  # the policy's count, as local
        t.join(30)
        assert set(done) == {"eng-a"} and len(done) == 40
        assert 'lemonpack_requests_total{model="user.gw",route="/v1/chat/completions",status="200"} 10.0' in \
            c.get("/metrics").text
        m = next(d for d in c.get("/v1/models").json()["data"] if d["id"] == "user.gw")
        assert m["remote"] is True and m["state"] == "ready" and len(m["endpoints"]) == 2
    assert lv.server.runner.starts == 0  # nothing spawned


def test_killed_engine_fails_over_and_none_is_lost(live, engines):
    a = engines("eng-a")
    b = engines("eng-b")
    lv = gateway(live, a.url, b.url)
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        all_up(c, a, b)
        assert sorted(who(c.post("/v1/chat/completions", json=CHAT)) for _ in range(2)) == ["eng-a", "eng-b"]
        a.kill()  # its pooled connection is dead, its port refuses
        answers = [who(c.post("/v1/chat/completions", json=CHAT)) for _ in range(10)]
        assert answers == ["eng-b"] * 10  # a request sent to eng-a could not connect: retried on eng-b
        assert endpoint_states(c) == {a.url: "down", b.url: "up"}
        # concurrent load after it is marked down: none lost
        with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c2:
            rs = []
            ts = [threading.Thread(target=lambda: rs.append(c2.post("/v1/chat/completions", json=CHAT)))
                  for _ in range(8)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(30)
        assert [r.status_code for r in rs] == [200] * 8


def test_refused_connection_is_retried_once_on_another_endpoint_before_any_probe(live, engines):
    """Probes every 5 s: only the request itself can see eng-a is gone."""
    a = engines("eng-a")
    b = engines("eng-b")
    lv = gateway(live, a.url, b.url, poll_ms=5000)
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        all_up(c, a, b)  # the first probe of each runs at once (the next only in 5 s)
        assert [who(c.post("/v1/chat/completions", json=CHAT)) for _ in range(2)] == ["eng-a", "eng-b"]
        a.kill()
        assert who(c.post("/v1/chat/completions", json=CHAT)) == "eng-b"  # picked eng-a, refused, retried
        m = next(d for d in c.get("/v1/models").json()["data"] if d["id"] == "user.gw")
        ea = next(e for e in m["endpoints"] if e["url"] == a.url)
        assert ea["state"] == "down" and "connect" in ea["reason"], ea
        assert [who(c.post("/v1/chat/completions", json=CHAT)) for _ in range(3)] == ["eng-b"] * 3
        b.kill()  # the last one: refused, nowhere to retry: 503, and the model is down
        for _ in range(2):
            r = c.post("/v1/chat/completions", json=CHAT)
            assert r.status_code == 503 and r.json()["error"]["type"] == "model_unavailable", r.text
            assert b.url in r.json()["error"]["message"]


def test_a_stream_that_started_is_never_retried(live, engines):
    a = engines("eng-a", "--die-mid-stream", "--chunks", "5")
    b = engines("eng-b", "--chunks", "5")
    lv = gateway(live, a.url, b.url, poll_ms=5000)
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        all_up(c, a, b)
        got, lines = [], []
        # the fake engine's stream is delimited by the close of its connection: it just ends
        with c.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                lines.append(line)
                if line.startswith("data: {"):
                    got.append(json.loads(line[6:])["system_fingerprint"])
        assert got == ["eng-a", "eng-a"] and "data: [DONE]" not in lines  # two chunks, then eng-a died
        assert b.posts() == 0  # never sent again elsewhere


def test_in_flight_limit_applies_to_an_endpoint_model(live, engines):
    a = engines("eng-a", "--chunks", "20", "--chunk-delay", "0.05")
    lv = gateway(live, a.url, max_in_flight=1)
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        all_up(c, a)
        with c.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
            chunks = r.iter_raw()  # kept: a dropped iterator closes the connection
            next(chunks)
            r2 = httpx.post(lv.url + "/v1/chat/completions", json=CHAT, trust_env=False, timeout=30)
            assert r2.status_code == 429 and r2.json()["error"]["type"] == "rate_limit_error"
            assert b"data: [DONE]" in b"".join(chunks)  # the stream ran to its end
        assert who(c.post("/v1/chat/completions", json=CHAT)) == "eng-a"


def test_probe_marks_down_within_one_interval_without_traffic(live, engines):
    a = engines("eng-a")
    b = engines("eng-b")
    lv = gateway(live, a.url, b.url)
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        assert wait_for(lambda: endpoint_states(c) == {a.url: "up", b.url: "up"}, 10)
        a.kill()
        # the recipe probes every 20 ms (pool minimum 50 ms): down well within a second, no request needed
        assert wait_for(lambda: endpoint_states(c)[a.url] == "down", 2)
        assert b.posts() == 0
        assert [who(c.post("/v1/chat/completions", json=CHAT)) for _ in range(3)] == ["eng-b"] * 3


def test_all_down_is_503_with_the_reason_and_back_when_one_returns(live, engines):
    a = engines("eng-a")
    b = engines("eng-b")
    lv = gateway(live, a.url, b.url)
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        assert who(c.post("/v1/chat/completions", json=CHAT)) in ("eng-a", "eng-b")
        a.kill()
        b.kill()
        assert wait_for(lambda: endpoint_states(c) == {a.url: "down", b.url: "down"}, 5)
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        err = r.json()["error"]
        assert err["type"] == "model_unavailable" and a.url in err["message"] and "refused" in err["message"]
        m = next(d for d in c.get("/v1/models").json()["data"] if d["id"] == "user.gw")
        assert m["state"] == "down" and b.url in m["reason"]
        assert c.get("/v1/health").json()["loaded"] == []
        engines("eng-b2", port=b.port)  # back on the same address
        assert wait_for(lambda: c.post("/v1/chat/completions", json=CHAT).status_code == 200, 5)
        assert who(c.post("/v1/chat/completions", json=CHAT)) == "eng-b2"
        assert c.get("/v1/health").json()["loaded"] == ["user.gw"]
        assert 'lemonpack_engine_failures_total{model="user.gw",reason="endpoints_down"}' in c.get("/metrics").text


def test_capability_gating_on_an_endpoint_model(live, engines):
    a = engines("eng-a")
    lv = gateway(live, a.url, capabilities=("chat_completion",))
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        r = c.post("/v1/embeddings", json={"model": "user.gw", "input": "x"})
        assert r.status_code == 400 and r.json()["error"]["type"] == "unsupported_operation"
        assert a.posts() == 0  # the engine was not touched
        assert who(c.post("/v1/chat/completions", json=CHAT)) == "eng-a"
        assert a.posts() == 1


def test_load_waits_for_a_probe_unload_stops_nothing(live, engines, tmp_path):
    port = free_port()
    lv = gateway(live, f"http://127.0.0.1:{port}", load_timeout=10)
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        assert wait_for(lambda: endpoint_states(c) == {f"http://127.0.0.1:{port}": "down"}, 5)
        got = []
        t = threading.Thread(target=lambda: got.append(c.post("/v1/load", json={"model_name": "user.gw"})))
        t.start()
        a = engines("eng-a", port=port)
        t.join(30)
        assert got[0].status_code == 200, got[0].text
        assert got[0].json()["remote"] is True and got[0].json()["endpoints"] == [a.url]
        r = c.post("/v1/unload", json={"model_name": "user.gw"})
        assert r.status_code == 200 and r.json()["state"] == "remote" and "does not stop" in r.json()["message"]
        assert a.proc.poll() is None
        assert who(c.post("/v1/chat/completions", json=CHAT)) == "eng-a"
    assert lv.server.runner.starts == 0


def test_load_of_a_down_endpoint_model_times_out_with_503(live):
    port = free_port()
    lv = gateway(live, f"http://127.0.0.1:{port}", load_timeout=0.5)
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        r = c.post("/v1/load", json={"model_name": "user.gw"})
        assert r.status_code == 503 and r.json()["error"]["type"] in ("model_unavailable", "model_load_timeout")
        assert str(port) in r.json()["error"]["message"] or "not ready" in r.json()["error"]["message"]


@pytest.mark.slow
def test_gateway_bench_runs_without_pytest(tmp_path):
    """bench/gateway.py from a plain install: prints its figures and stops what it started."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import sys, runpy; sys.modules['pytest'] = None; sys.modules['support'] = None; "
            "sys.argv = ['gateway.py', '--requests', '100', '--streams', '2', '--chunks', '500']; "
            f"runpy.run_path({str(root / 'bench' / 'gateway.py')!r}, run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "LEMONPACK_BENCH_RESULTS": str(tmp_path / "RESULTS.md")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "added by the gateway (endpoint model):" in r.stdout and "gateway added / local proxy added" in r.stdout
    assert "STILL RUNNING" not in r.stdout



class _TlsEngine:
    """A tiny https engine in a thread with a fresh self-signed certificate for 127.0.0.1
    (``cert``: its PEM file, trusted by nobody unless a test says so)."""

    def __init__(self, tmp_path):
        import datetime
        import http.server
        import ipaddress
        import ssl

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gateway-test")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(hours=1))
                .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                               False)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
                .sign(key, hashes.SHA256()))
        self.cert = tmp_path / "cert.pem"
        self.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                             serialization.PrivateFormat.PKCS8,
                                                             serialization.NoEncryption()))

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, code, doc):
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                self._send(200 if self.path == "/health" else 404, {"status": "ok"})

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._send(200, {"model": "eng-tls", "system_fingerprint": "eng-tls", "choices": []})

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, tmp_path / "key.pem")
        self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = f"https://127.0.0.1:{self.srv.server_address[1]}"

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def test_https_endpoint_verified_against_the_trust_store(live, tmp_path, monkeypatch):
    """An https endpoint is probed and relayed over TLS, its certificate checked against the
    system trust store (here a CA given by SSL_CERT_FILE)."""
    eng = _TlsEngine(tmp_path)
    try:
        monkeypatch.setenv("SSL_CERT_FILE", str(eng.cert))
        lv = gateway(live, eng.url)
        with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
            assert wait_for(lambda: endpoint_states(c) == {eng.url: "up"}, 10)
            assert who(c.post("/v1/chat/completions", json=CHAT)) == "eng-tls"
    finally:
        eng.close()


def test_https_endpoint_with_an_untrusted_certificate_is_down(live, tmp_path):
    eng = _TlsEngine(tmp_path)  # SSL_CERT_FILE not set: nobody trusts it
    try:
        lv = gateway(live, eng.url)
        with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
            assert wait_for(lambda: endpoint_states(c) == {eng.url: "down"}, 10)
            r = c.post("/v1/chat/completions", json=CHAT)
            assert r.status_code == 503 and r.json()["error"]["type"] == "model_unavailable"
            assert "certificate" in r.json()["error"]["message"].lower(), r.json()
    finally:
        eng.close()


def test_endpoints_added_or_removed_in_the_registry_are_picked_up(live, engines):
    a = engines("eng-a")
    b = engines("eng-b")
    lv = gateway(live, a.url)
    with httpx.Client(base_url=lv.url, trust_env=False, timeout=30) as c:
        assert who(c.post("/v1/chat/completions", json=CHAT)) == "eng-a"
        lv.registry.add("user.gw", "gw-engine", {}, endpoints=[a.url, b.url], replace=True)
        all_up(c, a, b)
        assert sorted(who(c.post("/v1/chat/completions", json=CHAT)) for _ in range(2)) == ["eng-a", "eng-b"]
        lv.registry.add("user.gw", "gw-engine", {}, endpoints=[b.url], replace=True)
        assert wait_for(lambda: endpoint_states(c) == {b.url: "up"}, 10)
        assert [who(c.post("/v1/chat/completions", json=CHAT)) for _ in range(3)] == ["eng-b"] * 3
        lv.registry.remove("user.gw")
        assert wait_for(lambda: c.post("/v1/chat/completions", json=CHAT).status_code == 404, 10)
