#!/usr/bin/env python3
"""Benchmark ``lemonpack catalogue build`` and ``catalogue search`` on 5,000 generated entries
(a script, not a test).

Inputs: ``--entries N`` (default 5,000) community recipes from 50 publishers (every tenth
signed with its publisher's key, a ROCm block with an arch glob on every third), each served
from a real HTTP server on 127.0.0.1 through the mirror mechanism, plus the repository's
official set. Measured in this process:

- build, cold: every entry fetched over loopback into an empty cache;
- build, warm ("excluding fetch"), in a process of its own (its peak RSS is the build's): the
  same build again, every fetch a verified cache hit
  (the cache still re-hashes each file: that is the verification, not the network), and
  per entry; baseline in the same run: reading, hashing and TOML/JSON-parsing every input
  file once (what any build must do at least), printed as a ratio;
- search: ``lemonpack catalogue search QUERY --index OUT --json`` as a real process, p50/p99
  over ``--searches`` runs with varying queries and filters; baseline: ``lemonpack --help``
  (the CLI's own start-up) in the same run; and the in-process search time over the index;
- site size: the output directory, ``catalogue.json`` and ``assets/catalogue-data.js``.

Targets (issue 28): warm build <= 5 s (a warm build reuses the memo of verified entries and
rendered fragments, :mod:`lemonpack.catalogue.memo`) and <= 300 MB RSS, CLI search p50 <= 150 ms
(it reads the compact ``catalogue-search.json`` the build writes beside ``catalogue.json``). Usage:
``python bench/catalogue.py [--entries N] [--searches K]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # lemonpack, and the tests' support package

from support.catalogue import CatalogueWorld, sign  # noqa: E402  (a plain script)


def populate(world: CatalogueWorld, n: int) -> list[Path]:
    """Write ``n`` entries (and their served recipes); returns every input file."""
    from cryptography.hazmat.primitives.asymmetric import ec

    files = []
    pubs = [f"pub{i:02d}" for i in range(50)]
    keys = {}
    for p in pubs:
        keys[p] = ec.generate_private_key(ec.SECP256R1())
        world.publisher(p, keys[p])
    art = b"artifact bytes for the benchmark"
    world.put("https://example.invalid/bench/artifact.tar.gz", art)
    art_sha = "sha256:" + hashlib.sha256(art).hexdigest()
    for i in range(n):
        pub = pubs[i % len(pubs)]
        name = f"bench-{i:05d}"
        platforms = {"linux": {"cpu": {"binary": "llama-server"}}}
        if i % 3 == 0:
            platforms["linux"]["rocm"] = {"binary": "llama-server", "arch": {"gfx11*": {"env": {"X": "1"}}}}
        doc = {"recipe": name, "display_name": f"Bench engine {i}", "api_contract_version": "1",
               "variant_of": "llamacpp", "capabilities": ["chat_completion"] + (["embeddings"] if i % 2 else []),
               "source": "https://example.invalid/bench/artifact.tar.gz", "sha256": art_sha, "platforms": platforms}
        data = json.dumps(doc, indent=2).encode()
        sig = f'\n[signature]\nvalue = "{sign(keys[pub], data)}"\n' if i % 10 == 0 else ""
        path, _ = world.https_recipe(pub, doc, signature=sig)
        files.append(path)
        files.append(world.mirror_root / "example.invalid" / pub / f"{name}.json")
    return files


def baseline(files: list[Path]) -> float:
    t = time.perf_counter()
    for f in files:
        data = f.read_bytes()
        hashlib.sha256(data).hexdigest()
        tomllib.loads(data.decode()) if f.suffix == ".toml" else json.loads(data)
    return time.perf_counter() - t


def build(world: CatalogueWorld, out: Path, cache: Path) -> tuple[float, dict]:
    from lemonpack.catalogue.build import BuildConfig, build as run_build
    from lemonpack.fetch import ArtifactCache, Mirror

    cfg = BuildConfig(out=out, source=world.source, mirror=Mirror(world.mirror), key=world.index_key,
                      password=b"catalogue-test-pw", cache=ArtifactCache(cache), epoch=0,
                      memo=cache / "catalogue-build" / "memo.json")
    t = time.perf_counter()
    index = run_build(cfg)
    return time.perf_counter() - t, index


def timed_process(args: list[str], env: dict) -> tuple[float, float]:
    """(wall, CPU user+sys) seconds of one run of ``args``."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(args, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def child_build(spec: str) -> None:
    """``--child-build SPEC``: one build in this (fresh) process; prints its wall and CPU
    seconds and this process's peak RSS as JSON (what a ``catalogue build`` process costs)."""
    import resource
    from types import SimpleNamespace

    source, mirror, key, out, cache = json.loads(spec)
    world = SimpleNamespace(source=Path(source), mirror=mirror, index_key=Path(key))
    c0 = time.process_time()
    wall, index = build(world, Path(out), Path(cache))  # type: ignore[arg-type]
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so a child of the bench
    # would report the bench's own peak (the cold build's) if it was larger
    hwm = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("VmHWM:"))
    print(json.dumps({"wall": wall, "cpu": time.process_time() - c0, "entries": len(index["entries"]),
                      "rss_mb": hwm / 1024, "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def build_in_child(world: CatalogueWorld, out: Path, cache: Path) -> dict:
    spec = json.dumps([str(world.source), world.mirror, str(world.index_key), str(out), str(cache)])
    t = time.perf_counter()
    r = subprocess.run([sys.executable, __file__, "--child-build", spec], check=True, capture_output=True, text=True)
    return {**json.loads(r.stdout.strip().splitlines()[-1]), "process": time.perf_counter() - t}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=5000)
    ap.add_argument("--searches", type=int, default=40)
    ap.add_argument("--builds", type=int, default=3, help="warm builds (median reported; the machine is shared)")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="CLI runs compile every module from source (PYTHONDONTWRITEBYTECODE=1)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-catalogue-") as tmp:
        tmp = Path(tmp)
        world = CatalogueWorld(tmp, community=False)
        try:
            t = time.perf_counter()
            files = populate(world, a.entries)
            print(f"generated {a.entries} entries in {time.perf_counter() - t:.1f} s")
            os.environ["LEMONPACK_CACHE_DIR"] = str(tmp / "cache")
            import resource

            c0 = time.process_time()
            cold, index = build(world, tmp / "out", tmp / "cache")
            cold_cpu = time.process_time() - c0
            cold_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"build cold (fetch over loopback, in the bench process): {cold:.2f} s, CPU {cold_cpu:.2f} s; "
                  f"{len(index['entries'])} entries, {len(index['rejected'])} rejected; peak RSS so far {cold_rss:.0f} MB")
            warms, bases = [], []
            for _ in range(a.builds):  # interleaved, so both see the same load; each a fresh process
                warms.append(build_in_child(world, tmp / "out", tmp / "cache"))
                c0 = time.process_time()
                bases.append((baseline(files), time.process_time() - c0))
            warm = statistics.median(w["wall"] for w in warms)
            warm_cpu = statistics.median(w["cpu"] for w in warms)
            rss = max(w["rss_mb"] for w in warms)
            proc = statistics.median(w["process"] for w in warms)
            base, base_cpu = statistics.median(b[0] for b in bases), statistics.median(b[1] for b in bases)
            n = warms[0]["entries"]
            ok = warm <= 5 and rss <= 300
            runs = ", ".join(f"{w['wall']:.2f}" for w in warms)
            print(f"build warm (excluding fetch; a process of its own), median of {a.builds}: {warm:.2f} s wall, "
                  f"CPU {warm_cpu:.2f} s = {warm / n * 1000:.2f} ms/entry (the whole process with start-up and imports "
                  f"{proc:.2f} s), peak RSS {rss:.0f} MB "
                  f"(target <= 5 s and <= 300 MB: {'met' if ok else 'NOT met'}; runs "
                  f"{runs}); baseline read+hash+parse "
                  f"inputs {base:.2f} s wall, CPU {base_cpu:.2f} s; ratio {warm / base:.1f}x wall, {warm_cpu / base_cpu:.1f}x CPU")
            from lemonpack.catalogue.index import load_index
            from lemonpack.catalogue.search import search

            idx = load_index(tmp / "out")
            queries = [("", {}), ("bench", {}), ("engine 42", {}), ("", {"accelerator": "rocm"}),
                       ("", {"gpu_arch": "gfx1151"}), ("embeddings", {"official": False}), ("qwen", {}),
                       ("bench-04999", {})]
            t = time.perf_counter()
            for q, f in queries * 5:
                search(idx, q, f)
            inproc = (time.perf_counter() - t) / (len(queries) * 5)
            env = dict(os.environ)
            # an installed lemonpack has its .pyc files (as bench/startup.py: bytecode caches in a
            # temporary PYTHONPYCACHEPREFIX, filled by a warm-up run; --no-bytecode-cache: none)
            if a.no_bytecode_cache:
                env["PYTHONDONTWRITEBYTECODE"] = "1"
            else:
                env.pop("PYTHONDONTWRITEBYTECODE", None)
                env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
            cli = [sys.executable, "-c", "from lemonpack.cli import main; main()"]
            for q, _f in queries:  # warm-up: page cache, bytecode caches, the verified-pair stamp
                timed_process(cli + ["catalogue", "search", q, "--index", str(tmp / "out"), "--json"], env)
            timed_process(cli + ["--help"], env)
            lat, base_lat, cpu, base_cpu_l = [], [], [], []
            flag = {"accelerator": "--accelerator", "gpu_arch": "--gpu-arch"}
            for i in range(a.searches):
                q, f = queries[i % len(queries)]
                args = cli + ["catalogue", "search", q, "--index", str(tmp / "out"), "--json"]
                for k, v in f.items():
                    args += ["--community"] if k == "official" else [flag[k], v]
                w, c = timed_process(args, env)
                lat.append(w)
                cpu.append(c)
                w, c = timed_process(cli + ["--help"], env)
                base_lat.append(w)
                base_cpu_l.append(c)
            p50, p99, b50 = pct(lat, 0.5), pct(lat, 0.99), pct(base_lat, 0.5)
            c50, bc50 = pct(cpu, 0.5), pct(base_cpu_l, 0.5)
            print(f"CLI search ({'no bytecode caches' if a.no_bytecode_cache else 'bytecode caches warm'}; "
                  f"reads catalogue-search.json, {(tmp / 'out' / 'catalogue-search.json').stat().st_size / 1e6:.1f} MB): "
                  f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms "
                  f"(target p50 <= 150 ms: {'met' if p50 <= 0.15 else 'NOT met'}); baseline `lemonpack --help` p50 "
                  f"{b50 * 1000:.0f} ms, ratio {p50 / b50:.2f}x; CPU p50 {c50 * 1000:.0f} ms vs {bc50 * 1000:.0f} ms "
                  f"({c50 / bc50:.2f}x); in-process search {inproc * 1000:.1f} ms/query over {n} entries")
            print(f"peak RSS of the bench process (cold build, in-process search): "
                  f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB; load average "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            size = sum(p.stat().st_size for p in (tmp / "out").rglob("*") if p.is_file())
            data_js = tmp / "out" / "assets" / "catalogue-data.js"
            print(f"site size: {size / 1e6:.1f} MB total; catalogue.json {(tmp / 'out' / 'catalogue.json').stat().st_size / 1e6:.1f} MB; "
                  f"catalogue-data.js {data_js.stat().st_size / 1e6:.1f} MB; "
                  f"index.html {(tmp / 'out' / 'index.html').stat().st_size / 1e3:.0f} kB")
        finally:
            world.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child-build"]:
        child_build(sys.argv[2])
        raise SystemExit(0)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _support import run_recorded

    raise SystemExit(run_recorded("catalogue", main))
