"""A real container engine under podman: label, probe (503 then 200), stop, gone; leftover
containers of a dead runtime are removed; a SIGKILLed ``lemonpack run`` leaves no container.

slow: real podman + runc with a busybox image referenced by digest, built by ``lemonpack build``
from a variant_of recipe whose artifact is a tar of busybox (served on 127.0.0.1 through
``--mirror``, loaded with skopeo under a unique name, removed at the end).

Cases: 07 (a foreign answer on the port never makes a container engine ready), 08 (a dead
runtime's container is removed by the next ``lemonpack run`` of any recipe).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from lemonpack.contract.model import HealthProbe
from lemonpack.errors import RuntimeFailure
from lemonpack.runtime.engines.containers import LABEL_OWNER, container_exists, container_labels
from lemonpack.runtime.engines.handles import Engines
from lemonpack.runtime.engines.proctable import pid_alive
from lemonpack.runtime.launch.plan import LaunchPlan

from support.helpers import RunProcess, free_port, wait_for
from support.recipes import http_probe, recipe_doc, write_recipe

pytestmark = pytest.mark.slow
PROBE = HealthProbe(type="http", endpoint="/cgi-bin/health", expected_status=200, timeout_seconds=60,
                    poll_interval_ms=100)


def podman(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120)


def plan_for(image, port: int, recipe: str = "bbtest", delay: float = 1.0) -> LaunchPlan:
    name = f"lemonpack-{recipe}-{port}"
    argv = image.serve_argv(name, port, delay)
    return LaunchPlan(recipe=recipe, model="none", executable="podman", argv=argv, host="127.0.0.1", port=port,
                      health_probe=PROBE, stop_argv_template=("podman", "rm", "-f", "-t", "0", name),
                      container_name=name, container_runtime="podman")


def test_image_is_pinned_by_digest(podman_env):
    image = podman_env["image"]
    assert "@sha256:" in image.ref
    digest = podman("image", "inspect", image.ref, "--format", "{{.Digest}}").stdout.strip()
    assert image.ref.endswith(digest)


def test_container_engine_probe_stop_gone(podman_env):
    engines = Engines()
    port = free_port()
    plan = plan_for(podman_env["image"], port)
    try:
        eng = engines.spawn(plan)
        took = engines.wait_ready(eng)
        assert took >= 0.9  # it answered 503 first
        assert engines.owns_port(eng) is True  # the container runs and its httpd holds the port
        labels = container_labels("podman", plan.container_name)
        assert labels[LABEL_OWNER] == engines.runtime_id and labels["lemonpack.recipe"] == "bbtest"
        assert eng.argv[:6] == ("podman", "run", "--label", f"{LABEL_OWNER}={engines.runtime_id}", "--label",
                                "lemonpack.recipe=bbtest")
        engines.stop(eng)
        noise = [x for x in eng.logs.lines() if "level=error" in x or "Error:" in x]
        assert not noise, noise  # a normal stop is quiet (no signal forwarded to a removed container)
        assert podman("ps", "-a", "--filter", f"name=^{plan.container_name}$", "-q").stdout.strip() == ""
        assert not pid_alive(eng.pid)
        # the same name can start again at once
        eng = engines.start(plan_for(podman_env["image"], port, delay=0))
        engines.stop(eng)
        assert not container_exists("podman", plan.container_name)
    finally:
        engines.close()
        podman("rm", "-f", "-t", "0", plan.container_name)


def test_container_missing_image_fails_fast(podman_env):
    engines = Engines()
    port = free_port()
    bad = podman_env["image"].ref.split("@")[0] + "@sha256:" + "0" * 64
    plan = plan_for(podman_env["image"], port)
    plan = LaunchPlan(**{**plan.__dict__, "argv": plan.argv[:7] + ("--pull", "never", bad, "true")})
    try:
        with pytest.raises(RuntimeFailure, match="exited with code"):
            engines.start(plan)
    finally:
        engines.close()
    assert not container_exists("podman", plan.container_name)


def test_leftover_of_dead_runtime_is_removed_foreign_one_is_refused(podman_env):
    port = free_port()
    plan = plan_for(podman_env["image"], port, delay=0)
    name = plan.container_name
    dead_owner = "999999999-1"
    leftover = list(plan.argv)
    leftover[1:2] = ["run", "-d", "--label", f"{LABEL_OWNER}={dead_owner}"]
    assert podman(*leftover[1:]).returncode == 0
    engines = Engines()
    try:
        assert name in engines.cleanup_leftovers()["containers"]
        assert wait_for(lambda: not container_exists("podman", name), 10)
        # a leftover with our name from a dead owner is cleared before the start
        assert podman(*leftover[1:]).returncode == 0
        eng = engines.start(plan)
        engines.stop(eng)
        # a foreign container (no label) holding the name is refused, not removed
        foreign = [a for a in leftover if a not in ("--label", f"{LABEL_OWNER}={dead_owner}")]
        assert podman(*foreign[1:]).returncode == 0
        engines.container_timeout = 1.0
        with pytest.raises(RuntimeFailure, match="already exists and is not ours"):
            engines.spawn(plan)
        assert container_exists("podman", name)
    finally:
        engines.close()
        podman("rm", "-f", "-t", "0", name)


def container_recipe(path: Path, image) -> Path:
    """A recipe at ``path`` running busybox httpd from ``image`` in a podman container."""
    name = "lemonpack-{recipe}-{port}"
    return write_recipe(path, recipe_doc(
        "bb-container", display_name="busybox httpd in a container", command="podman",
        args=["run", "--rm", "--name", name, "--network", "host", image.ref, *image.shell,
              image.command("{port}", 0, "{host}")],
        block={"stop_command": "podman", "stop_command_args": ["rm", "-f", "-t", "0", name]},
        health_probe=http_probe("/cgi-bin/health", timeout=60, poll_ms=100)))


def test_lemonpack_run_container_stops_on_sigint_and_is_cleaned_after_sigkill(podman_env, tmp_path):
    recipe = container_recipe(tmp_path / "bb.json", podman_env["image"])
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    env = {"LEMONPACK_CACHE_DIR": str(tmp_path / "c"), "LEMONPACK_CONFIG_DIR": str(tmp_path / "f")}
    for sig in (signal.SIGINT, signal.SIGKILL):
        port = free_port()
        name = f"lemonpack-bb-container-{port}"
        run = RunProcess([str(recipe), "--model", str(model), "--port", str(port)], env)
        assert run.wait_line("ready: ", timeout=60), run.err
        assert container_exists("podman", name)
        os.kill(run.proc.pid, sig)
        rc = run.finish()
        if sig == signal.SIGINT:
            assert rc == 130, run.err
            assert not container_exists("podman", name)
            assert "level=error" not in run.err and "Error:" not in run.err, run.err  # a quiet normal stop
        else:
            assert wait_for(lambda: not container_exists("podman", name), 10, 0.2), "container survived"


def test_runner_restarts_a_container_removed_behind_its_back(podman_env):
    from lemonpack.runtime.lifecycle.runner import Runner
    from lemonpack.runtime.lifecycle.supervisor import State

    port = free_port()
    plan = plan_for(podman_env["image"], port, delay=0)
    runner = Runner({"bb": plan}, Engines(grace=1.0))
    try:
        first = runner.ensure_ready("bb", timeout=60)
        assert podman("rm", "-f", "-t", "0", plan.container_name).returncode == 0  # a crash, seen from us
        assert wait_for(lambda: runner.state("bb") is State.STOPPED, 20, 0.05)
        second = runner.ensure_ready("bb", timeout=60)  # same name again: the old one is gone
        assert second.pid != first.pid and container_exists("podman", plan.container_name)
    finally:
        runner.close()
        podman("rm", "-f", "-t", "0", plan.container_name)
    assert not container_exists("podman", plan.container_name)


class _Foreign:
    """Another process's HTTP service answering 200 on every path of ``port``."""

    def __init__(self, port: int):
        import http.server
        import threading

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Length", "15")
                self.end_headers()
                self.wfile.write(b"foreign service")

            def log_message(self, *a):
                pass
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def test_case07_a_busy_port_refuses_a_container_launch(podman_env):
    # case 07: a foreign service answers /health on the engine's port before the launch
    port = free_port()
    plan = plan_for(podman_env["image"], port, recipe="rt07a")
    foreign = _Foreign(port)
    engines = Engines()
    try:
        with pytest.raises(RuntimeFailure, match=f"port {port} on 127.0.0.1 is already in use"):
            engines.start(plan)
        assert not container_exists("podman", plan.container_name)  # nothing was launched
    finally:
        foreign.close()
        engines.close()
        podman("rm", "-f", "-t", "0", plan.container_name)


def test_case07_a_foreign_answer_after_the_launch_never_makes_a_container_ready(podman_env):
    # The race the pre-launch check cannot close: the port is free at the launch, another
    # process takes it while the container starts. The container here never listens (sleep),
    # so every answer is foreign; readiness is tied to the container, so it must time out.
    image = podman_env["image"]
    port = free_port()
    name = f"lemonpack-rt07b-{port}"
    probe = HealthProbe(type="http", endpoint="/health", expected_status=200, timeout_seconds=4,
                        poll_interval_ms=100)
    plan = LaunchPlan(recipe="rt07b", model="none", executable="podman",
                      argv=("podman", "run", "--rm", "--name", name, "--network", "host", image.ref,
                            *image.shell, f"exec {image.bb} sleep 60"),
                      host="127.0.0.1", port=port, health_probe=probe,
                      stop_argv_template=("podman", "rm", "-f", "-t", "0", name),
                      container_name=name, container_runtime="podman")
    engines = Engines()
    foreign = None
    try:
        eng = engines.spawn(plan)
        foreign = _Foreign(port)
        with pytest.raises(RuntimeFailure, match="not ready after 4s"):
            engines.wait_ready(eng)
        assert f"HTTP 200 from another process holding port {port}" in eng.probe_seen
        assert container_exists("podman", name)  # the container did run: it just is not who answered
        assert engines.owns_port(eng) is False
    finally:
        if foreign is not None:
            foreign.close()
        engines.close()
        podman("rm", "-f", "-t", "0", name)
    assert not container_exists("podman", name)


def test_case08_a_dead_runtimes_container_is_removed_by_the_next_run_of_a_process_recipe(podman_env, tmp_path):
    # case 08: the runtime and its whole tree (the sentinel too) are SIGKILLed at once; the
    # next `lemonpack run`, of a *process* recipe, removes the container left behind.
    recipe = container_recipe(tmp_path / "bb.json", podman_env["image"])
    proc_recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=[]))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    env = {"LEMONPACK_CACHE_DIR": str(tmp_path / "c"), "LEMONPACK_CONFIG_DIR": str(tmp_path / "f")}
    port = free_port()
    name = f"lemonpack-bb-container-{port}"
    try:
        run = RunProcess([str(recipe), "--model", str(model), "--port", str(port), "--quiet"], env)
        assert run.wait_line("ready: ", timeout=60), run.err
        children = [int(p) for p in Path(f"/proc/{run.proc.pid}/task/{run.proc.pid}/children").read_text().split()]
        for pid in children:  # the engine client and the sentinel
            os.kill(pid, signal.SIGKILL)
        os.kill(run.proc.pid, signal.SIGKILL)
        run.finish()
        assert wait_for(lambda: not any(pid_alive(p) for p in children), 5)
        assert container_exists("podman", name), "the leftover this case is about was not left"
        nxt = RunProcess([str(proc_recipe), "--model", str(model), "--quiet"], env)
        assert nxt.wait_line("ready: ", timeout=60), nxt.err
        assert not container_exists("podman", name)
        os.kill(nxt.proc.pid, signal.SIGINT)
        assert nxt.finish() == 130, nxt.err
        assert f"removed leftovers of dead runtimes: containers ['{name}']" in nxt.err
    finally:
        podman("rm", "-f", "-t", "0", name)


def test_a_container_started_without_a_name_is_found_by_its_label_and_removed_on_stop(podman_env):
    """No ``--name``, no ``--rm``: stop still removes the container (by the engine label the
    runtime put on it), so nothing of the engine is left in podman's storage."""
    engines = Engines()
    port = free_port()
    image = podman_env["image"]
    argv = ("podman", "run", "--network", "host", image.ref, *image.shell, image.command(port, 0))
    plan = LaunchPlan(recipe="bbnoname", model="none", executable="podman", argv=argv, host="127.0.0.1", port=port,
                      health_probe=PROBE, container_runtime="podman")
    try:
        eng = engines.start(plan)
        ids = podman("ps", "-a", "-q", "--filter", f"label=lemonpack.engine={eng.tag}").stdout.split()
        assert len(ids) == 1  # labelled although the recipe gave no name
        engines.stop(eng)
        assert podman("ps", "-a", "-q", "--filter", f"label=lemonpack.engine={eng.tag}").stdout.split() == []
    finally:
        engines.close()
        podman("rm", "-f", "-t", "0", *podman("ps", "-a", "-q", "--filter", "label=lemonpack.recipe=bbnoname")
               .stdout.split())
