"""Lifecycle benchmark: what the runtime adds to an engine's cold start, and how fast it stops.

    python bench/lifecycle.py [--runs N] [--poll-ms MS] [--no-container]

1. cold start to ready of the fake engine (tests/support/fake_engine.py), in the same run:
   - *direct*: ``subprocess.Popen`` + a loop GETting ``/health`` every ``poll_ms``;
   - *runtime*: ``Runner.ensure_ready`` (supervisor + spawner thread + probe), same poll;
   the median difference is the runtime's overhead (target: <= 50 ms, dominated by the
   poll interval).
2. stop to gone (every process of the engine gone) through ``Engines.stop``: a well-behaved
   engine, one with a forked child and a setsid'd grandchild, and (with podman) a container
   until ``podman ps -a`` no longer lists it.
Prints each figure (ms) and the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))  # runs from a plain install: no pytest, no tests/support

from _support import FAKE_ENGINE, all_gone, fake_plan, free_port, read_pids  # noqa: E402

from lemonpack.contract.model import HealthProbe  # noqa: E402
from lemonpack.runtime.engines.containers import container_exists  # noqa: E402
from lemonpack.runtime.engines.handles import Engines  # noqa: E402
from lemonpack.runtime.lifecycle.runner import Runner  # noqa: E402


def direct_start(poll_s: float) -> float:
    port = free_port()
    with httpx.Client(trust_env=False, verify=False) as c:  # made before the clock starts
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, str(FAKE_ENGINE), "--port", str(port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while True:
            try:
                if c.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(poll_s)
    took = time.perf_counter() - t0
    p.terminate()
    p.wait()
    return took


def runtime_start(engines: Engines, poll_ms: int) -> tuple[float, float]:
    probe = HealthProbe(type="http", endpoint="/health", expected_status=200, timeout_seconds=30,
                        poll_interval_ms=poll_ms)
    runner = Runner({"m": fake_plan(probe=probe)}, engines)
    t0 = time.perf_counter()
    eng = runner.ensure_ready("m", timeout=30)
    took = time.perf_counter() - t0
    t1 = time.perf_counter()
    runner.unload("m")
    stop = time.perf_counter() - t1
    assert eng.poll() is not None
    return took, stop


def stop_tree(engines: Engines, tmp: Path, i: int) -> float:
    pidfile = tmp / f"pids{i}"
    eng = engines.start(fake_plan("--fork-child", "--grandchild", "--pid-file", str(pidfile)))
    pids = read_pids(pidfile).values()
    t0 = time.perf_counter()
    engines.stop(eng)
    took = time.perf_counter() - t0
    assert all_gone(pids)
    return took


def container_stop(engines: Engines, tmp: Path) -> tuple[float, float] | None:
    from _support import CONTAINERS_CONF, import_image, podman_usable, remove_image

    if podman_usable():
        return None
    os.environ.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    image, tag = import_image(tmp)
    try:
        return _container_stop(engines, image)
    finally:
        remove_image(tag)


def _container_stop(engines: Engines, image: str) -> tuple[float, float]:
    from _support import serve_argv

    from lemonpack.runtime.launch.plan import LaunchPlan

    port = free_port()
    name = f"lemonpack-bench-{port}"
    plan = LaunchPlan(recipe="bench", model="none", executable="podman", argv=serve_argv(image, name, port, 0),
                      host="127.0.0.1", port=port,
                      health_probe=HealthProbe(type="http", endpoint="/cgi-bin/health", timeout_seconds=60,
                                               poll_interval_ms=20),
                      stop_argv_template=("podman", "rm", "-f", "-t", "0", name), container_name=name,
                      container_runtime="podman")
    t0 = time.perf_counter()
    eng = engines.start(plan)
    ready = time.perf_counter() - t0
    t0 = time.perf_counter()
    engines.stop(eng)
    took = time.perf_counter() - t0
    assert not container_exists("podman", name)
    return ready, took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--poll-ms", type=int, default=20)
    ap.add_argument("--no-container", action="store_true")
    a = ap.parse_args()
    engines = Engines(grace=2.0)
    direct_start(a.poll_ms / 1000)  # warm the page cache
    direct, through, stops = [], [], []
    for _ in range(a.runs):  # interleaved, so both see the same machine state
        direct.append(direct_start(a.poll_ms / 1000))
        t, s = runtime_start(engines, a.poll_ms)
        through.append(t)
        stops.append(s)
    with tempfile.TemporaryDirectory(prefix="lp-bench-") as d:
        trees = [stop_tree(engines, Path(d), i) for i in range(a.runs)]
        cont = None if a.no_container else container_stop(engines, Path(d))
    engines.close()
    md, mr = statistics.median(direct), statistics.median(through)
    ms = lambda x: f"{x * 1000:8.1f} ms"  # noqa: E731
    print(f"runs: {a.runs}, poll interval {a.poll_ms} ms (medians)")
    print(f"cold start to ready, direct Popen + poll:   {ms(md)}")
    print(f"cold start to ready, through the runtime:   {ms(mr)}")
    print(f"  added by the runtime:                     {ms(mr - md)}  (ratio {mr / md:.3f})")
    print(f"stop to gone, process (unload):             {ms(statistics.median(stops))}")
    print(f"stop to gone, process + child + grandchild: {ms(statistics.median(trees))}")
    if cont:
        print(f"container start to ready (podman):          {ms(cont[0])}")
        print(f"stop to gone, container (podman rm, ps -a): {ms(cont[1])}  "
              f"(ratio to process stop {cont[1] / statistics.median(stops):.1f})")
    else:
        print("container: skipped (podman not usable here)")
    return 0


if __name__ == "__main__":
    from _support import run_recorded

    raise SystemExit(run_recorded("lifecycle", main))
