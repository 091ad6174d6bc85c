#!/usr/bin/env python3
"""Benchmark ``lemonpack build`` on one large artifact (a script, not a test).

Artifact. A tar.gz (gzip -1) of a tree of ``--size-mib`` MiB of content (default 1024), in
files of at most 64 MiB: half is random bytes (incompressible, the worst case for gzip
throughput per output byte), half is log-like text (line numbers + a few repeated words,
compresses about 5-10x: the cheap case). The tar.gz is therefore about 55-60 % of the
content size. Content is seeded per run only through ``os.urandom``; nothing depends on it.

Measured, each in its own child process (``os.wait4`` gives that child's wall time and
peak RSS, ``ru_maxrss``):

- cold build: ``lemonpack build RECIPE --out OUT --mirror http://127.0.0.1:PORT`` with an
  empty ``LEMONPACK_CACHE_DIR``: download (served by a thread of this script) + sha256 +
  safe unpack + re-pack as a reproducible gzip -1 layer + layout;
- baseline: ``sha256sum ARTIFACT`` plus ``tar -cf - -C TREE . | gzip -1 > /dev/null`` (the
  content, already extracted: the unavoidable hashing and compression work);
- warm build: the same recipe into a new ``--out`` with the cache filled (no download, the
  layer comes from the layer cache).

Targets: cold peak RSS < 200 MiB, cold wall <= 1.5 x baseline, warm wall < 1 s.

Usage: ``python bench/build.py [--size-mib N] [--workdir DIR] [--keep]``.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

MIB = 1024 * 1024
URL = "https://example.invalid/bench/llama-server-bench.tar.gz"
TARGETS = {"rss_mib": 200.0, "ratio": 1.5, "warm_s": 1.0}


def make_tree(tree: Path, size_mib: int) -> None:
    """``size_mib`` MiB of content: half random, half log-like text, files <= 64 MiB,
    plus an executable ``llama-server`` script."""
    tree.mkdir(parents=True)
    (tree / "llama-server").write_text("#!/bin/sh\necho bench\n")
    (tree / "llama-server").chmod(0o755)
    half = size_mib * MIB // 2
    chunk = 64 * MIB
    n = 0
    left = half
    while left > 0:
        k = min(chunk, left)
        with open(tree / f"random-{n:03d}.bin", "wb") as f:
            for off in range(0, k, MIB):
                f.write(os.urandom(min(MIB, k - off)))
        left -= k
        n += 1
    words = [b"alpha", b"beta", b"gamma", b"delta", b"tensor", b"layer", b"kv-cache", b"rope"]
    n = 0
    left = half
    line_no = 0
    while left > 0:
        k = min(chunk, left)
        with open(tree / f"text-{n:03d}.log", "wb") as f:
            written = 0
            while written < k:
                block = b"".join(b"%08d %s %s %d\n" % (line_no + i, words[i % 8], words[(i * 3) % 8], i * 7 % 1000)
                                 for i in range(4096))
                line_no += 4096
                block = block[:k - written]
                f.write(block)
                written += len(block)
        left -= k
        n += 1


def make_artifact(tree: Path, artifact: Path) -> None:
    with open(artifact, "wb") as out:
        tar = subprocess.Popen(["tar", "-cf", "-", "-C", str(tree), "--sort=name", "."], stdout=subprocess.PIPE)
        gz = subprocess.run(["gzip", "-1", "-n"], stdin=tar.stdout, stdout=out, check=True)
        tar.stdout.close()
        if tar.wait() != 0 or gz.returncode != 0:
            raise SystemExit("making the artifact failed")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(4 * MIB):
            h.update(block)
    return h.hexdigest()


def measured(argv: list[str], env: dict | None = None, shell: bool = False) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run ``argv`` as one child; ``(wall seconds, peak RSS MiB of that child, result)``.
    For a shell pipeline the RSS is the shell's largest child (RUSAGE_CHILDREN semantics)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, shell=shell, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out_r = threading.Thread(target=lambda: setattr(p, "_out", p.stdout.read()))
    err_r = threading.Thread(target=lambda: setattr(p, "_err", p.stderr.read()))
    out_r.start()
    err_r.start()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    out_r.join()
    err_r.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    res = subprocess.CompletedProcess(argv, p.returncode, p._out.decode(errors="replace"),
                                      p._err.decode(errors="replace"))
    return wall, usage.ru_maxrss / 1024, res


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="content size in MiB (default 1024)")
    ap.add_argument("--workdir", type=Path, default=None, help="where to put everything (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ns = ap.parse_args()

    work = ns.workdir or Path(tempfile.mkdtemp(prefix="lemonpack-bench-build-"))
    work.mkdir(parents=True, exist_ok=True)
    httpd = None
    try:
        from lemonpack.fetch import mirror_path
        tree, www = work / "tree", work / "www"
        artifact = www / mirror_path(URL)
        if not artifact.is_file():
            shutil.rmtree(tree, ignore_errors=True)
            t0 = time.perf_counter()
            make_tree(tree, ns.size_mib)
            artifact.parent.mkdir(parents=True, exist_ok=True)
            make_artifact(tree, artifact)
            print(f"prepared content {ns.size_mib} MiB, artifact {artifact.stat().st_size / MIB:.1f} MiB "
                  f"in {time.perf_counter() - t0:.1f} s", flush=True)
        sha = sha256_file(artifact)
        recipe = work / "bench.json"
        recipe.write_text(json.dumps({
            "recipe": "bench-build", "display_name": "bench", "api_contract_version": "1",
            "variant_of": "llamacpp", "capabilities": ["completion"],
            "platforms": {"linux": {"cpu": {"binary": "llama-server", "source": URL, "sha256": f"sha256:{sha}"}}}}))

        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(www)))
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{httpd.server_address[1]}"

        cache = work / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        for d in ("out-cold", "out-warm"):
            shutil.rmtree(work / d, ignore_errors=True)
        env = {**os.environ, "LEMONPACK_CACHE_DIR": str(cache)}
        env.pop("SOURCE_DATE_EPOCH", None)
        lp = shutil.which("lemonpack") or sys.exit("lemonpack not on PATH")
        argv = [lp, "build", str(recipe), "--mirror", base, "--no-progress", "--json"]

        cold_s, cold_rss, cold = measured([*argv, "--out", str(work / "out-cold")], env)
        if cold.returncode != 0:
            print(cold.stdout, cold.stderr, file=sys.stderr)
            return 1
        sha_s, sha_rss, _ = measured(["sha256sum", str(artifact)])
        gz_s, gz_rss, _ = measured(f"tar -cf - -C '{tree}' . | gzip -1 > /dev/null", shell=True)
        base_s = sha_s + gz_s
        warm_s, warm_rss, warm = measured([*argv, "--out", str(work / "out-warm")], env)
        if warm.returncode != 0:
            print(warm.stdout, warm.stderr, file=sys.stderr)
            return 1
        same = json.loads(cold.stdout)["indexes"] == json.loads(warm.stdout)["indexes"]
        ratio = cold_s / base_s
        ok = {"rss": cold_rss < TARGETS["rss_mib"], "ratio": ratio <= TARGETS["ratio"],
              "warm": warm_s < TARGETS["warm_s"]}
        print(f"content {ns.size_mib} MiB, artifact {artifact.stat().st_size / MIB:.1f} MiB, "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"cold build:  {cold_s:7.2f} s   peak RSS {cold_rss:6.1f} MiB   "
              f"[{'ok' if ok['rss'] else 'MISSED'}: < {TARGETS['rss_mib']:.0f} MiB]")
        print(f"baseline:    {base_s:7.2f} s   (sha256sum {sha_s:.2f} s, tar|gzip -1 {gz_s:.2f} s)")
        print(f"ratio:       {ratio:7.2f} x   [{'ok' if ok['ratio'] else 'MISSED'}: <= {TARGETS['ratio']} x]")
        print(f"warm build:  {warm_s:7.2f} s   peak RSS {warm_rss:6.1f} MiB   "
              f"[{'ok' if ok['warm'] else 'MISSED'}: < {TARGETS['warm_s']:.0f} s]; same index digest: {same}")
        return 0 if all(ok.values()) and same else 2
    finally:
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if not ns.keep and ns.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
