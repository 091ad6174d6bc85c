"""Gateway benchmark: what ``lemonpack serve`` adds in front of an engine it does not spawn.

    python bench/gateway.py [--requests N] [--chunks N] [--streams N]

All in one run, against one external engine process (``bench/proxy.py``'s minimal asyncio
HTTP/1.1 engine, started here, not by lemonpack) and a ``python -m lemonpack.cli serve``
subprocess with a private ``LEMONPACK_CONFIG_DIR`` whose registry holds two models:
``user.bench-remote`` (``endpoints``: that engine; the gateway path: endpoint choice,
probe-driven health) and ``user.bench-tiny`` (an engine serve spawns itself, the local proxy
path, for reference).

1. small ``POST /v1/chat/completions`` latency (sequential, keep-alive, after a warm-up,
   interleaved in rounds): *direct* to the external engine, through the gateway, and
   through serve to its own engine; p50/p99, what each adds, and the ratio of the
   gateway's added p50 to the local proxy's;
2. an SSE stream of ``--chunks`` events direct versus through the gateway: the throughput
   ratio (median of interleaved pairs), each side's median and spread (the direct stream
   varies most: the fake engine sends each event by itself, and a client reading as fast as
   it writes takes them nearly one by one) and serve's CPU per gateway stream.

Targets: the gateway adds no more than the local proxy path (added p50 ratio <= 1.5x, the
same relay plus one pick) and streams at >= 0.9x direct. Everything started is stopped.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _support import print_latencies, run_recorded, us  # noqa: E402
from proxy import Client, cpu_seconds, free_port, pct, start_lemonpack, stop, wait_port  # noqa: E402

REMOTE = "user.bench-remote"
LOCAL = "user.bench-tiny"


def body(model: str, **kw) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                       **kw}).encode()


def latencies(targets: dict[str, tuple[int, bytes]], n: int, rounds: int = 20) -> dict[str, list[float]]:
    clients = {k: Client(p) for k, (p, _) in targets.items()}
    out: dict[str, list[float]] = {k: [] for k in targets}
    try:
        for k, c in clients.items():
            for _ in range(200):
                assert c.post(targets[k][1])[0] == 200, k
        per = max(1, n // rounds)
        for _ in range(rounds):
            for k, c in clients.items():
                b = targets[k][1]
                for _ in range(per):
                    t0 = time.perf_counter()
                    st, _ = c.post(b)
                    out[k].append(time.perf_counter() - t0)
                    assert st == 200, (k, st)
    finally:
        for c in clients.values():
            c.close()
    return out


def stream(port: int, model: str, chunks: int) -> float:
    c = Client(port)
    try:
        c.post(body(model, stream=True, n_chunks=10))
        t0 = time.perf_counter()
        st, data = c.post(body(model, stream=True, n_chunks=chunks))
        total = time.perf_counter() - t0
    finally:
        c.close()
    assert st == 200 and data.count(b"\n\n") == chunks + 1, (st, data.count(b"\n\n"))
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000, help="small POSTs per target (after 200 warm-up)")
    ap.add_argument("--chunks", type=int, default=5000, help="SSE events in the stream")
    ap.add_argument("--streams", type=int, default=11, help="stream pairs (direct, gateway)")
    a = ap.parse_args()
    from lemonpack.runtime.models.registry import ModelRegistry

    t_start = time.monotonic()
    serve = engine = None
    with tempfile.TemporaryDirectory(prefix="lp-bench-gateway-") as d:
        tmp = Path(d)
        try:
            ext_port = free_port()
            engine = subprocess.Popen([sys.executable, str(Path(__file__).resolve().with_name("proxy.py")),
                                       "--engine", "--host", "127.0.0.1", "--port", str(ext_port),
                                       "--port-file", str(tmp / "external.port")])
            wait_port(ext_port, engine, "external engine")
            lp_port = free_port()
            # start_lemonpack writes the config (recipe + local model); the endpoint model joins it
            # before the first request (the registry is re-read on each look-up)
            serve = start_lemonpack(tmp, lp_port, tmp / "local.port")
            ModelRegistry(tmp / "config" / "user_models.json").add(
                REMOTE, "bench-engine", {}, endpoints=[f"http://127.0.0.1:{ext_port}"])
            deadline = time.monotonic() + 20
            while True:
                c = Client(lp_port)
                st, answer = c.post(body(REMOTE))
                c.close()
                if st == 200:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"gateway answered {st}: {answer[:300]!r}")
                time.sleep(0.1)
            targets = {"direct": (ext_port, body(REMOTE)), "gateway": (lp_port, body(REMOTE)),
                       "local": (lp_port, body(LOCAL))}
            cpu0 = cpu_seconds(serve.pid)
            lat = latencies(targets, a.requests)
            cpu_lat = cpu_seconds(serve.pid) - cpu0
            pairs, cpu_streams = [], []
            for _ in range(a.streams):
                direct = stream(ext_port, REMOTE, a.chunks)
                c0 = cpu_seconds(serve.pid)
                pairs.append((direct, stream(lp_port, REMOTE, a.chunks)))
                cpu_streams.append(cpu_seconds(serve.pid) - c0)
        finally:
            stop(serve, signal.SIGINT)
            stop(engine)
        engine_alive = engine is not None and engine.poll() is None

    p = print_latencies(lat, a.requests, pct, width=8)
    add_gw = p["gateway"][0] - p["direct"][0]
    add_local = p["local"][0] - p["direct"][0]  # its own engine is the same program
    print(f"  added by the gateway (endpoint model):      p50 {us(add_gw)}   "
          f"p99 {us(p['gateway'][1] - p['direct'][1])}")
    print(f"  added by serve in front of its own engine:  p50 {us(add_local)}")
    ratio = add_gw / add_local if add_local > 0 else float("inf")
    print(f"  gateway added / local proxy added: p50 {ratio:.2f}x")
    print(f"  lemonpack serve CPU per request: {cpu_lat / (3 * (a.requests // 20 * 20) + 600) * 1e6:.0f} us")
    thr = statistics.median(d / g for d, g in pairs)
    print(f"SSE stream of {a.chunks} chunks, {a.streams} interleaved pairs: direct best "
          f"{min(x[0] for x in pairs) * 1e3:.1f} ms, gateway best {min(x[1] for x in pairs) * 1e3:.1f} ms; "
          f"throughput through the gateway / direct {thr:.2f}x (median)")
    print(f"  medians: direct {statistics.median(x[0] for x in pairs) * 1e3:.1f} ms (its spread "
          f"{min(x[0] for x in pairs) * 1e3:.1f}-{max(x[0] for x in pairs) * 1e3:.1f}), gateway "
          f"{statistics.median(x[1] for x in pairs) * 1e3:.1f} ms ({min(x[1] for x in pairs) * 1e3:.1f}-"
          f"{max(x[1] for x in pairs) * 1e3:.1f}); serve CPU per gateway stream "
          f"{statistics.median(cpu_streams) * 1e3:.1f} ms (median)")
    print("targets:")
    print(f"  gateway added p50 <= 1.5x local proxy's: {'met' if ratio <= 1.5 else 'MISSED'} ({ratio:.2f}x)")
    print(f"  streaming >= 0.9x direct:                {'met' if thr >= 0.9 else 'MISSED'} ({thr:.2f}x)")
    print(f"stopped: lemonpack serve, external engine{' STILL RUNNING' if engine_alive else ''}; "
          f"run took {time.monotonic() - t_start:.1f} s")
    return 1 if engine_alive else 0


if __name__ == "__main__":
    sys.exit(run_recorded("gateway", main))
