"""Probes against a scripted loopback HTTP server and a stand-in child (no engine process)."""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from lemonpack.contract.model import HealthProbe
from lemonpack.errors import RuntimeFailure
from lemonpack.runtime.logs import LogRing
from lemonpack.runtime.probes import Watchdog, check_once, probe_host, wait_ready


class Child:
    """Stands in for an engine process: exits when told to."""

    def __init__(self):
        self.rc = None
        self.ev = threading.Event()

    def exit(self, rc):
        self.rc = rc
        self.ev.set()

    def poll(self):
        return self.rc

    def wait_exit(self, timeout):
        return self.ev.wait(timeout)


@pytest.fixture
def server():
    """A server whose /health answers ``statuses`` in turn (the last one repeats)."""
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            st = self.server.statuses
            code = st.pop(0) if len(st) > 1 else st[0]
            self.server.hits += 1
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.statuses, srv.hits = [200], 0
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def hp(**kw):
    base = dict(type="http", endpoint="/health", expected_status=200, timeout_seconds=5, poll_interval_ms=10)
    return HealthProbe(**{**base, **kw})


def test_http_waits_through_503_and_404(server):
    server.statuses = [503, 503, 404, 200]
    seen = []
    wait_ready(hp(), "127.0.0.1", server.server_address[1], Child(), seen=seen)
    assert seen == ["HTTP 503", "HTTP 404", "HTTP 200"] and server.hits == 4


def test_http_only_expected_status_passes(server):
    server.statuses = [200]
    with pytest.raises(RuntimeFailure, match=r"not ready after 1s .*HTTP 200"):
        wait_ready(hp(expected_status=204, timeout_seconds=1), "127.0.0.1", server.server_address[1], Child())


def test_poll_interval_is_honoured(server):
    server.statuses = [503] * 6 + [200]
    t0 = time.monotonic()
    wait_ready(hp(poll_interval_ms=100), "127.0.0.1", server.server_address[1], Child())
    assert 0.55 < time.monotonic() - t0 < 2.0


def test_child_exit_fails_fast_with_code_and_log_tail():
    child, logs = Child(), LogRing()
    for i in range(30):
        logs.append(f"line {i}")
    threading.Timer(0.2, child.exit, args=(42,)).start()
    t0 = time.monotonic()
    with pytest.raises(RuntimeFailure) as e:
        wait_ready(hp(timeout_seconds=60, poll_interval_ms=5000), "127.0.0.1", 1, child, logs=logs, name="eng")
    assert time.monotonic() - t0 < 2
    msg = str(e.value)
    assert "eng exited with code 42" in msg and "line 29" in msg and "line 9\n" not in msg


def test_cancel_stops_the_wait():
    ev = threading.Event()
    threading.Timer(0.1, ev.set).start()
    with pytest.raises(RuntimeFailure, match="cancelled"):
        wait_ready(hp(timeout_seconds=30, poll_interval_ms=20), "127.0.0.1", 1, Child(), cancelled=ev)


def test_tcp_probe():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    assert check_once(HealthProbe(type="tcp"), "127.0.0.1", port)[0] is False
    s.listen()
    assert check_once(HealthProbe(type="tcp"), "0.0.0.0", port) == (True, "connected")
    s.close()


def test_process_probe_waits_one_interval():
    child = Child()
    p = HealthProbe(type="process", poll_interval_ms=100)
    t0 = time.monotonic()
    wait_ready(p, "127.0.0.1", 0, child)
    assert time.monotonic() - t0 >= 0.09
    child.exit(1)
    with pytest.raises(RuntimeFailure, match="code 1"):
        wait_ready(p, "127.0.0.1", 0, child)


def test_wildcard_hosts_probe_loopback():
    assert probe_host("0.0.0.0") == "127.0.0.1" and probe_host("::") == "::1" and probe_host("10.1.2.3") == "10.1.2.3"


def test_watchdog_reports_after_consecutive_failures(server):
    server.statuses = [200, 500, 200, 500, 500, 500]
    reports = []
    dog = Watchdog(hp(), "127.0.0.1", server.server_address[1], reports.append, interval=0.02, failures=3).start()
    deadline = time.monotonic() + 5
    while not reports and time.monotonic() < deadline:
        time.sleep(0.01)
    dog.stop()
    assert reports == ["health check failed 3 times in a row (HTTP 500)"]
    assert server.hits == 6  # the isolated failure did not count


def test_watchdog_stop_is_silent(server):
    # 3 failures report a crash; stop after the 2nd and wait many intervals: no report, no probe
    server.statuses = [500]
    reports = []
    dog = Watchdog(hp(), "127.0.0.1", server.server_address[1], reports.append, interval=0.2, failures=3).start()
    deadline = time.monotonic() + 5
    while server.hits < 2 and time.monotonic() < deadline:
        time.sleep(0.002)
    dog.stop()
    hits = server.hits
    assert hits == 2
    time.sleep(1.0)  # five intervals: a running watchdog would have reported by now
    assert reports == [] and server.hits == hits


def test_exit_before_any_answer_reads_well():
    child = Child()
    child.exit(3)
    with pytest.raises(RuntimeFailure, match=r"^engine exited with code 3 before its health probe answered$"):
        wait_ready(hp(), "127.0.0.1", 9, child)


def test_owns_port_false_keeps_waiting_then_times_out(server):
    with pytest.raises(RuntimeFailure, match="HTTP 200 from another process holding port"):
        wait_ready(hp(timeout_seconds=1), "127.0.0.1", server.server_address[1], Child(), owns_port=lambda: False)
    # None ("cannot tell") does not block readiness: the first answer passes at once
    hits = server.hits
    took = wait_ready(hp(), "127.0.0.1", server.server_address[1], Child(), owns_port=lambda: None)
    assert 0 < took < 1.0 and server.hits == hits + 1


def test_describe_probe():
    from lemonpack.runtime.probes import describe_probe

    assert describe_probe(hp(timeout_seconds=60, poll_interval_ms=500), "0.0.0.0", 8080) == \
        "http GET http://127.0.0.1:8080/health -> 200 (timeout 60s, every 500 ms)"
    assert describe_probe(hp(type="tcp"), "::", 81).startswith("tcp connect to [::1]:81 (timeout 5s")
