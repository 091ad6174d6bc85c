"""Probes against a scripted loopback HTTP server and a stand-in child (no engine process)."""

from __future__ import annotations

import http.server
import socket
import threading
import pytest
from support.helpers import FakeClock

from lemonpack.contract.model import HealthProbe
from lemonpack.errors import RuntimeFailure
from lemonpack.runtime.engines.logs import LogRing
from lemonpack.runtime.engines.probes import Watchdog, check_once, probe_host, wait_ready


class Child:
    """Stands in for an engine process: exits when told to, or during its ``exit_on_wait``-th
    wait. With a ``clock`` (:class:`~support.helpers.FakeClock`) a wait does not block: it
    moves the clock on by its timeout (or not at all when the child exits meanwhile), so
    a probe's timeout counts polls, not the machine's speed. ``waits`` lists every timeout."""

    def __init__(self, clock=None, exit_on_wait=None, rc=1):
        self.rc = None
        self.ev = threading.Event()
        self.clock, self.exit_on_wait, self.exit_rc = clock, exit_on_wait, rc
        self.waits = []

    def exit(self, rc):
        self.rc = rc
        self.ev.set()

    def poll(self):
        return self.rc

    def wait_exit(self, timeout):
        self.waits.append(timeout)
        if self.exit_on_wait is not None and len(self.waits) >= self.exit_on_wait:
            self.exit(self.exit_rc)
        if self.clock is None:
            return self.ev.wait(timeout)
        if not self.ev.is_set():
            self.clock.advance(timeout)
        return self.ev.is_set()


@pytest.fixture
def server():
    """A server whose /health answers ``statuses`` in turn (the last one repeats)."""
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            st = self.server.statuses
            code = st.pop(0) if len(st) > 1 else st[0]
            self.server.hits += 1
            self.server.on_hit(self.server.hits)
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.statuses, srv.hits, srv.on_hit = [200], 0, lambda hits: None
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def hp(**kw):
    base = dict(type="http", endpoint="/health", expected_status=200, timeout_seconds=5, poll_interval_ms=10)
    return HealthProbe(**{**base, **kw})


def test_http_waits_through_503_and_404(server):
    server.statuses = [503, 503, 404, 200]
    seen, clock = [], FakeClock()
    wait_ready(hp(), "127.0.0.1", server.server_address[1], Child(clock), seen=seen, clock=clock)
    assert seen == ["HTTP 503", "HTTP 404", "HTTP 200"] and server.hits == 4


def test_http_only_expected_status_passes(server):
    server.statuses = [200]
    clock = FakeClock()
    with pytest.raises(RuntimeFailure, match=r"not ready after 5s "):
        wait_ready(hp(expected_status=204, timeout_seconds=5, poll_interval_ms=1000), "127.0.0.1",
                   server.server_address[1], Child(clock), clock=clock, seen=(seen := []))
    assert seen[0] == "HTTP 200" and clock() == 1005.0  # seen[1]: the last poll, 50 ms to answer, may time out


def test_poll_interval_is_honoured(server):
    server.statuses = [503] * 6 + [200]
    clock = FakeClock()
    child = Child(clock)
    took = wait_ready(hp(poll_interval_ms=100), "127.0.0.1", server.server_address[1], child, clock=clock)
    assert child.waits == [0.1] * 6 and took == pytest.approx(0.6) and server.hits == 7


def test_timeout_counts_on_the_clock_it_is_given(server):
    # 5 s at 1 s intervals: polls at 0, 1, 2, 3, 4 and a last one at the deadline, whatever the
    # machine's speed (that last poll has 50 ms to answer: "timed out" is a fair last word)
    server.statuses = [503]
    clock, seen = FakeClock(), []
    child = Child(clock)
    with pytest.raises(RuntimeFailure, match=r"not ready after 5s \(http probe of port \d+: (HTTP 503|timed out)\)"):
        wait_ready(hp(timeout_seconds=5, poll_interval_ms=1000), "127.0.0.1", server.server_address[1], child,
                   clock=clock, seen=seen)
    assert child.waits == [1.0] * 5 and seen[0] == "HTTP 503" and clock() == 1005.0


def test_child_exit_fails_fast_with_code_and_log_tail():
    # the child exits during the first wait between polls: the load fails then, not at the timeout
    clock = FakeClock()
    child, logs = Child(clock, exit_on_wait=1, rc=42), LogRing()
    for i in range(30):
        logs.append(f"line {i}")
    with pytest.raises(RuntimeFailure) as e:
        wait_ready(hp(timeout_seconds=60, poll_interval_ms=5000), "127.0.0.1", 1, child, logs=logs, name="eng",
                   clock=clock)
    assert child.waits == [5.0] and clock() == 1000.0
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
    clock = FakeClock()
    child = Child(clock)
    p = HealthProbe(type="process", poll_interval_ms=100)
    assert wait_ready(p, "127.0.0.1", 0, child, clock=clock) == pytest.approx(0.1) and child.waits == [0.1]
    child.exit(1)
    with pytest.raises(RuntimeFailure, match="code 1"):
        wait_ready(p, "127.0.0.1", 0, child)


def test_wildcard_hosts_probe_loopback():
    assert probe_host("0.0.0.0") == "127.0.0.1" and probe_host("::") == "::1" and probe_host("10.1.2.3") == "10.1.2.3"


def test_watchdog_reports_after_consecutive_failures(server):
    server.statuses = [200, 500, 200, 500, 500, 500]
    reports = []
    dog = Watchdog(hp(), "127.0.0.1", server.server_address[1], reports.append, interval=0.02, failures=3).start()
    assert dog.join(30)  # it ends by itself once it reported (30 s: a hang guard only)
    assert reports == ["health check failed 3 times in a row (HTTP 500)"]
    assert server.hits == 6  # the isolated failure did not count


def test_watchdog_stop_is_silent(server):
    # 2 failures would report a crash; the 2nd probe's answer stops the watchdog before it
    # arrives: no report, and no probe after it (the thread has ended)
    server.statuses = [500]
    reports = []
    server.on_hit = lambda hits: hits == 2 and dog.stop()
    dog = Watchdog(hp(), "127.0.0.1", server.server_address[1], reports.append, interval=0.02, failures=2)
    dog.start()
    assert dog.join(30)  # a hang guard only: a stopped watchdog ends at its next wait
    assert reports == [] and server.hits == 2


def test_exit_before_any_answer_reads_well():
    child = Child()
    child.exit(3)
    with pytest.raises(RuntimeFailure, match=r"^engine exited with code 3 before its health probe answered$"):
        wait_ready(hp(), "127.0.0.1", 9, child)


def test_owns_port_false_keeps_waiting_then_times_out(server):
    # On the fake clock the timeout is 5 polls, each allowed >= 1 s of real time to answer:
    # the machine's load cannot turn the telling answer into "timed out" (it did with 1 s in all).
    clock = FakeClock()
    child = Child(clock)
    with pytest.raises(RuntimeFailure, match=r"not ready after 5s .*: HTTP 200 from another process holding port"):
        wait_ready(hp(timeout_seconds=5, poll_interval_ms=1000), "127.0.0.1", server.server_address[1], child,
                   owns_port=lambda: False, clock=clock)
    assert child.waits == [1.0] * 5
    # None ("cannot tell") does not block readiness: the first answer passes at once
    child = Child(clock)
    took = wait_ready(hp(), "127.0.0.1", server.server_address[1], child, owns_port=lambda: None, clock=clock)
    assert took == 0 and child.waits == []


def test_describe_probe():
    from lemonpack.runtime.engines.probes import describe_probe

    assert describe_probe(hp(timeout_seconds=60, poll_interval_ms=500), "0.0.0.0", 8080) == \
        "http GET http://127.0.0.1:8080/health -> 200 (timeout 60s, every 500 ms)"
    assert describe_probe(hp(type="tcp"), "::", 81).startswith("tcp connect to [::1]:81 (timeout 5s")
