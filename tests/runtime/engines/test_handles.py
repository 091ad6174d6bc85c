"""Engines, probes and the Runner against the real fake engine (real processes, loopback)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import httpx
import pytest

from support.helpers import all_gone, fake_plan, read_pids, wait_for

from lemonpack.contract.model import HealthProbe
from lemonpack.errors import RuntimeFailure
from lemonpack.runtime.engines.handles import Engines
from lemonpack.runtime.engines.proctable import ENV_ENGINE, environ_value, pid_alive, proc_info
from lemonpack.runtime.lifecycle.runner import Runner
from lemonpack.runtime.lifecycle.supervisor import State


@pytest.fixture
def engines():
    e = Engines(grace=0.5, subreaper=False)
    yield e
    e.close()


def probe(type_="http", timeout=20, interval=20):
    return HealthProbe(type=type_, endpoint="/health", expected_status=200, timeout_seconds=timeout,
                       poll_interval_ms=interval)


def test_ready_after_503s_then_serves_and_stops(engines):
    # 503 for the first 3 answers, not for 0.5 s: a loaded machine started the engine after
    # its delay had passed, and the first answer was already 200
    eng = engines.spawn(fake_plan("--health-503", "3"))
    took = engines.wait_ready(eng)
    assert took > 0 and eng.ready_after >= took
    assert eng.probe_seen[-2:] == ["HTTP 503", "HTTP 200"]
    r = httpx.post(eng.url + "/v1/chat/completions", json={"messages": []}, trust_env=False)
    assert r.json()["choices"][0]["message"]["content"].startswith("Hello")
    with httpx.stream("POST", eng.url + "/v1/chat/completions", json={"stream": True}, trust_env=False) as r:
        lines = [x for x in r.iter_lines() if x]
    assert lines[-1] == "data: [DONE]" and all(x.startswith("data: ") for x in lines)
    assert any("listening on" in line for line in eng.logs.lines())
    engines.stop(eng)
    assert not pid_alive(eng.pid) and eng.poll() == 0


def test_exit_during_probe_fails_fast_with_code_and_logs(engines):
    # No time bound: waiting out the 60 s timeout would say "not ready after 60s", not the exit
    # code (and the waits between polls are the child's exit: tests/runtime/engines/test_probes.py)
    with pytest.raises(RuntimeFailure) as e:
        engines.start(fake_plan("--exit-now", "--exit-code", "5", probe=probe(timeout=60)))
    assert "exited with code 5" in str(e.value) and "not ready" not in str(e.value)
    assert "cannot load model: giving up with code 5" in str(e.value)


def test_probe_timeout(engines):
    # a lower bound only (load cannot make it fail); the timeout's arithmetic is tested on a
    # fake clock in tests/runtime/engines/test_probes.py
    t0 = time.monotonic()
    with pytest.raises(RuntimeFailure) as e:
        engines.start(fake_plan("--health-delay", "100", probe=probe(timeout=1, interval=100)))
    assert time.monotonic() - t0 >= 1.0
    assert "not ready after 1s" in str(e.value) and "HTTP 503" in str(e.value)
    assert "listening on" in str(e.value)


def test_only_expected_status_passes(engines):
    p = HealthProbe(type="http", endpoint="/v1/models", expected_status=204, timeout_seconds=1, poll_interval_ms=50)
    with pytest.raises(RuntimeFailure, match="HTTP 200"):
        engines.start(fake_plan(probe=p))


def test_tcp_and_process_probes(engines):
    eng = engines.start(fake_plan("--health-delay", "100", probe=probe("tcp")))
    engines.stop(eng)
    eng = engines.start(fake_plan("--no-listen", probe=probe("process", interval=200)))
    assert eng.poll() is None
    engines.stop(eng)
    with pytest.raises(RuntimeFailure, match="code 3"):
        engines.start(fake_plan("--exit-now", probe=probe("process", interval=2000)))


def test_stop_command_runs_first_as_argv(engines):
    stop = (sys.executable, "-c", "import sys; print('stop command for', sys.argv[1])", "{pid}")
    eng = engines.start(fake_plan(stop_argv=stop))
    engines.stop(eng)
    assert f"[stop] stop command for {eng.pid}" in eng.logs.lines()


def test_missing_executable_is_a_runtime_failure(engines):
    plan = fake_plan()
    plan = type(plan)(**{**plan.__dict__, "argv": ("/nonexistent/engine",), "executable": "/nonexistent/engine"})
    with pytest.raises(RuntimeFailure, match="cannot run"):
        engines.spawn(plan)


@pytest.mark.parametrize("flags", [
    ("--ignore-sigterm",),
    ("--fork-child",),
    ("--fork-child", "--ignore-sigterm"),
    ("--grandchild",),
    ("--grandchild", "--ignore-sigterm", "--fork-child"),
])
def test_stop_leaves_no_process_behind(engines, tmp_path, flags):
    pidfile = tmp_path / "pids"
    eng = engines.start(fake_plan(*flags, "--pid-file", str(pidfile)))
    pids = read_pids(pidfile)
    assert len(pids) == 1 + flags.count("--fork-child") + flags.count("--grandchild")
    assert all(pid_alive(p) for p in pids.values())
    if "--grandchild" in flags:  # it really escaped: another session, not our child's child
        g = pids["grandchild"]
        assert os.getsid(g) != eng.pid and os.getpgid(g) != eng.pid
    t0 = time.monotonic()
    engines.stop(eng)
    assert all_gone(pids.values()), {r: p for r, p in pids.items() if pid_alive(p)}
    # Processes that ignore SIGTERM are gone, so SIGKILL followed the grace period. The bound
    # is a hang guard only (a stop stuck past the 0.5 s grace and the 10 s SIGKILL loop).
    assert time.monotonic() - t0 < 30


def test_runner_concurrent_first_requests_start_one_engine():
    runner = Runner({"m": fake_plan("--health-delay", "0.3")}, Engines(grace=0.5))
    results, errors = [], []

    def ask():
        try:
            results.append(runner.ensure_ready("m", timeout=30))
        except Exception as e:  # pragma: no cover
            errors.append(e)
    threads = [threading.Thread(target=ask) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors and len(results) == 16
        assert len({e.pid for e in results}) == 1 and runner.starts == 1
        assert runner.state("m") is State.READY
    finally:
        runner.close()
    assert not pid_alive(results[0].pid)


def test_runner_crash_after_ready_goes_stopped_and_next_request_restarts():
    runner = Runner({"m": fake_plan("--crash-after-ready", "1.0", "--exit-code", "9")}, Engines(grace=0.5))
    try:
        first = runner.ensure_ready("m", timeout=30)
        assert wait_for(lambda: runner.state("m") is State.STOPPED, 10)
        assert first.poll() == 9
        second = runner.ensure_ready("m", timeout=30)
        assert second.pid != first.pid and runner.starts == 2
    finally:
        runner.close()


def test_runner_watchdog_reports_a_hung_engine():
    runner = Runner({"m": fake_plan()}, Engines(grace=0.3), watchdog_interval=0.1, watchdog_failures=2)
    try:
        eng = runner.ensure_ready("m", timeout=30)
        os.kill(eng.pid, signal.SIGSTOP)  # alive, but answers nothing
        assert wait_for(lambda: runner.state("m") is State.STOPPED, 15)
        assert not pid_alive(eng.pid)
    finally:
        runner.close()


def test_runner_failure_is_not_sticky(tmp_path):
    calls = []

    def plans(model):
        calls.append(model)
        return fake_plan("--exit-now") if len(calls) == 1 else fake_plan()
    runner = Runner(plans, Engines(grace=0.3))
    try:
        with pytest.raises(RuntimeFailure, match="code 3"):
            runner.ensure_ready("m", timeout=30)
        assert wait_for(lambda: runner.state("m") is State.STOPPED, 10)
        assert runner.ensure_ready("m", timeout=30).poll() is None
    finally:
        runner.close()


def test_runner_unload_during_start():
    runner = Runner({"m": fake_plan("--health-delay", "100")}, Engines(grace=0.3))
    errors = []
    t = threading.Thread(target=lambda: errors.append(pytest.raises(RuntimeFailure, runner.ensure_ready, "m", 30)))
    t.start()
    assert wait_for(lambda: runner.engine("m") is not None, 10)
    eng = runner.engine("m")
    runner.unload("m")
    t.join(10)
    assert errors and "unloaded" in str(errors[0].value)
    assert not pid_alive(eng.pid)
    runner.close()


def test_engine_outlives_the_thread_that_asked_for_it(engines):
    """PR_SET_PDEATHSIG fires when the forking *thread* exits: spawns run on the long-lived
    spawner thread, so a request thread that ends does not take the engine with it."""
    out = []
    t = threading.Thread(target=lambda: out.append(engines.start(fake_plan())))
    t.start()
    t.join()
    # the kernel sends PR_SET_PDEATHSIG from the exiting thread: once its task is gone from
    # /proc the signal would have been sent; the engine then has 0.3 s to die (it must not)
    assert wait_for(lambda: not os.path.exists(f"/proc/self/task/{t.native_id}"), 30)
    assert not out[0].wait_exit(0.3)
    assert out[0].poll() is None and pid_alive(out[0].pid)
    engines.stop(out[0])


@pytest.mark.parametrize("mib", [0, 256])
def test_engine_that_exits_during_probe_leaves_no_grandchild(engines, tmp_path, mib):
    # The grandchild is a member by its tag alone, which it loses early in its exit, before it
    # is a zombie: with 256 MiB to free that moment lasts, and a stop that forgot it then
    # returned while it was still there (what a loaded machine did to the plain case).
    pidfile = tmp_path / "pids"
    with pytest.raises(RuntimeFailure, match="code 3"):
        engines.start(fake_plan("--grandchild", "--grandchild-mib", str(mib), "--fork-child", "--ignore-sigterm",
                                "--exit-now", "--pid-file", str(pidfile)))
    pids = read_pids(pidfile)
    assert set(pids) == {"engine", "child", "grandchild"}
    assert all_gone(pids.values()), {r: (p, proc_info(p), environ_value(p, ENV_ENGINE))
                                     for r, p in pids.items() if pid_alive(p)}


def test_runner_crash_after_ready_cleans_up_what_the_engine_left(tmp_path):
    pidfile = tmp_path / "pids"
    runner = Runner({"m": fake_plan("--grandchild", "--ignore-sigterm", "--crash-after-ready", "1.0",
                                    "--pid-file", str(pidfile))}, Engines(grace=0.3))
    try:
        runner.ensure_ready("m", timeout=30)
        pids = read_pids(pidfile)
        assert wait_for(lambda: runner.state("m") is State.STOPPED, 10)
        assert all_gone(pids.values()), {r: p for r, p in pids.items() if pid_alive(p)}
    finally:
        runner.close()


class _Foreign:
    """Another process's server (here: a thread of the test) answering /health 200 on a port."""

    def __init__(self, port: int = 0):
        import http.server

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def test_a_busy_port_is_refused_before_the_launch(engines, tmp_path):
    foreign = _Foreign()
    pids = tmp_path / "pids"
    try:
        with pytest.raises(RuntimeFailure, match=f"port {foreign.port} on 127.0.0.1 is already in use"):
            engines.start(fake_plan("--pid-file", str(pids), port=foreign.port, probe=probe(timeout=20)))
        assert not pids.exists()  # nothing was spawned
    finally:
        foreign.close()


def test_probe_answered_by_another_process_while_the_engine_lives_is_not_ready(engines):
    # The port is free at the launch; a foreign server takes it right after (the race the
    # pre-launch check cannot close). The engine stays alive without listening: the only
    # answers come from the foreign server, and they must not count.
    plan = fake_plan("--no-listen", probe=probe(timeout=2))
    eng = engines.spawn(plan)
    foreign = _Foreign(plan.port)
    try:
        with pytest.raises(RuntimeFailure) as e:
            engines.wait_ready(eng)
        assert "from another process holding port" in str(e.value), str(e.value)
        assert eng.probe_seen[-1] == f"HTTP 200 from another process holding port {plan.port}"
    finally:
        engines.stop(eng)
        foreign.close()


def test_owns_port_true_for_the_engine_itself(engines):
    eng = engines.start(fake_plan())
    try:
        assert engines.owns_port(eng) is True
    finally:
        engines.stop(eng)


def test_a_failing_exit_callback_is_logged_and_the_crash_still_reaches_the_supervisor(caplog):
    import logging

    seen = []

    def bad_observer(model, old, new):  # an observer that raises on every transition
        seen.append(new)
        raise RuntimeError("observer bug")
    plan = fake_plan("--crash-after-ready", "1.0", "--exit-code", "9")
    runner = Runner({"m": plan}, Engines(grace=0.5), on_state=bad_observer)
    try:
        with caplog.at_level(logging.WARNING, logger="lemonpack.runtime"):
            eng = runner.ensure_ready("m", timeout=30)

            def boom(rc):
                raise ValueError(f"callback bug {rc}")
            eng.on_exit(boom)  # registered after the Runner's own: it runs, fails, is logged
            assert wait_for(lambda: runner.state("m") is State.STOPPED, 10)
        assert runner.last_error("m") == "engine exited with code 9"
        assert seen == [State.STARTING, State.READY, State.STOPPING, State.STOPPED]
        text = "\n".join(f"{r.getMessage()} {r.exc_info[1] if r.exc_info else ''}" for r in caplog.records)
        assert "callback bug 9" in text and "observer bug" in text
    finally:
        runner.close()


def test_a_failing_exit_callback_does_not_hide_the_next_one(engines):
    eng = engines.spawn(fake_plan("--exit-now", "--exit-code", "3"))
    got = []
    eng.on_exit(lambda rc: 1 / 0)
    eng.on_exit(got.append)
    assert wait_for(lambda: got == [3], 10)
    engines.stop(eng)
