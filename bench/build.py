#!/usr/bin/env python3
"""Benchmark ``lemonpack build`` on one large artifact (a script, not a test).

Artifact. A tar.gz (gzip -1) of a tree of ``--size-mib`` MiB of content (default 1024), in
files of at most 64 MiB: half is random bytes (incompressible, the worst case for gzip
throughput per output byte), half is log-like text (line numbers + a few repeated words,
compresses about 5-10x: the cheap case). The tar.gz is therefore about 55-60 % of the
content size. Content is seeded per run only through ``os.urandom``; nothing depends on it.

Base. A synthetic base image (an OCI layout written by this script: one tar+gzip layer of
``--base-mib`` MiB of content, half random, half text, about the size of a minimal Debian
base with libc, libstdc++, libgomp and libssl: 143 MB of tar, 57 MB of gzip).

Measured, each in its own child process (``os.wait4`` gives that child's wall time and
peak RSS, ``ru_maxrss``), one run each, side by side, each after an ``os.sync()`` (the
gigabytes the earlier steps wrote are written back first: otherwise the kernel throttles the
next step's writes, e.g. the warm build's 300 MB copy, for the earlier steps' dirty pages):

- cold build: ``lemonpack build RECIPE --out OUT --mirror http://127.0.0.1:PORT`` with an
  empty ``LEMONPACK_CACHE_DIR``: download (served by a thread of this script) + sha256 +
  safe unpack + re-pack as a reproducible gzip -1 layer + layout;
- cold build ``--base oci:BASE``, empty cache: the same plus the base's layers copied (and
  hashed) byte for byte, never recompressed; the base's layers are also read once for their
  diff_ids and whiteouts (then remembered by digest): shown first on its own ("base first
  seen"), then with the base already known (target: <= cold build + 10 %);
- cold build ``--compression zstd``, empty cache;
- baselines: ``sha256sum ARTIFACT`` plus ``tar -cf - -C TREE . | gzip -1 > /dev/null`` (the
  content, already extracted: the unavoidable hashing and compression work, single-threaded:
  the ratio's denominator), and for reference ``tar | pigz -1 -p CPUS``, ``tar | sha256sum``,
  ``tar | zstd -3 -T CPUS``, ``lemonpack --help`` (the CLI's start-up);
- warm build: the same recipe into a new ``--out`` with the caches filled (no download, the
  layer comes from the layer cache, trusted by its recorded stat facts).

Targets: cold peak RSS < 200 MiB, cold wall <= 0.6 x baseline, with base <= 1.1 x cold,
warm wall <= 0.3 s.

The lemonpack children are the console script's own entry (``lemonpack.cli.main``) run by
this interpreter, without PYTHONDONTWRITEBYTECODE (set in some dev shells and CI images) and
with their bytecode kept in a ``PYTHONPYCACHEPREFIX`` of the work directory (the source tree
is not written to): an installed package has its ``.pyc`` files (pip compiles them at
install), so a first build, not measured, writes them and the builds measure what a user waits for,
not the compilation of ~60 modules, nor a version manager's shim in front of the script
(pyenv's adds a bash and a pyenv process).

Usage: ``python bench/build.py [--size-mib N] [--base-mib N] [--workdir DIR] [--keep]``.
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
ROOT = Path(__file__).resolve().parents[1]
ENTRY = "import sys; from lemonpack.cli import main; sys.exit(main())"
URL = "https://example.invalid/bench/llama-server-bench.tar.gz"
TARGETS = {"rss_mib": 200.0, "ratio": 0.6, "warm_s": 0.3, "base_ratio": 1.1}


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


def make_base(work: Path, size_mib: int) -> Path:
    """An OCI layout ``work/base`` (tag ``base``) with one tar+gzip layer of ``size_mib`` MiB."""
    root = work / "base"
    if (root / "index.json").is_file():
        return root
    tree = work / "base-tree"
    shutil.rmtree(tree, ignore_errors=True)
    make_tree(tree, size_mib)
    (tree / "llama-server").unlink()
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    tmp = work / "base-layer.tar"
    subprocess.run(["tar", "-cf", str(tmp), "-C", str(tree), "--sort=name", "."], check=True)
    diff_id = sha256_file(tmp)
    gz = work / "base-layer.tar.gz"
    with open(gz, "wb") as out:
        subprocess.run(["gzip", "-1", "-n", "-c", str(tmp)], stdout=out, check=True)
    tmp.unlink()
    layer = sha256_file(gz)
    size = gz.stat().st_size
    gz.rename(blobs / layer)
    shutil.rmtree(tree)

    def put(doc: dict) -> tuple[str, int]:
        data = json.dumps(doc).encode()
        d = hashlib.sha256(data).hexdigest()
        (blobs / d).write_bytes(data)
        return f"sha256:{d}", len(data)
    cd, cs = put({"architecture": "amd64", "os": "linux", "config": {"Env": ["PATH=/usr/bin:/bin"]},
                  "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]}})
    md, ms = put({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                  "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
                  "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                              "digest": f"sha256:{layer}", "size": size}]})
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms,
         "annotations": {"org.opencontainers.image.ref.name": "base"}}]}))
    return root


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(4 * MIB):
            h.update(block)
    return h.hexdigest()


def measured(argv: list[str], env: dict | None = None, shell: bool = False) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run ``argv`` as one child; ``(wall seconds, peak RSS MiB of that child, result)``.
    For a shell pipeline the RSS is the shell's largest child (RUSAGE_CHILDREN semantics)."""
    os.sync()  # the earlier steps' dirty pages written back first: no step pays for another's writes
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
    res.cpu = usage.ru_utime + usage.ru_stime  # the child and its waited-for descendants
    CPU[" ".join(argv) if isinstance(argv, list) else argv] = res.cpu
    return wall, usage.ru_maxrss / 1024, res


CPU: dict[str, float] = {}


def cpu_of(res) -> str:
    return f"cpu {res.cpu:6.2f} s"


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="content size in MiB (default 1024)")
    ap.add_argument("--base-mib", type=int, default=140, help="base layer content in MiB (default 140)")
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

        for d in ("out-cold", "out-warm", "out-base-first", "out-base", "out-zstd", "cache", "cache-base",
                  "cache-zstd", "out-warmup", "cache-warmup"):
            shutil.rmtree(work / d, ignore_errors=True)
        base_dir = make_base(work, ns.base_mib)
        base_known = work / "cache-base-known"  # a cache that has seen the base (its facts recorded)
        env0 = {**os.environ, "PYTHONPYCACHEPREFIX": str(work / "pycache"),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        env0.pop("SOURCE_DATE_EPOCH", None)
        env0.pop("PYTHONDONTWRITEBYTECODE", None)
        lp = [sys.executable, "-c", ENTRY]  # what the console script runs
        argv = [*lp, "build", str(recipe), "--mirror", base, "--no-progress", "--json"]

        cpu: dict[str, float] = {}

        def build(out: str, cache: Path, *extra: str):
            wall, rss, res = measured([*argv, "--out", str(work / out), *extra],
                                      {**env0, "LEMONPACK_CACHE_DIR": str(cache)})
            if res.returncode != 0:
                print(res.stdout, res.stderr, file=sys.stderr)
                raise SystemExit(1)
            cpu[out] = res.cpu
            return wall, rss, json.loads(res.stdout)

        # one build, not measured, fills the bytecode cache with every module a build imports
        # (lemonpack's and its libraries': with a PYTHONPYCACHEPREFIX their own __pycache__ is not read)
        build("out-warmup", work / "cache-warmup")
        cold_s, cold_rss, cold = build("out-cold", work / "cache")
        first_s, first_rss, _ = build("out-base-first", work / "cache-base", "--base", f"oci:{base_dir}:base")
        # the base known, the engine cold: the layer cache keeps the base facts, the rest is emptied
        if not base_known.exists():
            shutil.copytree(work / "cache-base", base_known)
        for sub in ("artifacts",):
            shutil.rmtree(base_known / sub, ignore_errors=True)
        for rec in (base_known / "layers").glob("*.json"):
            rec.unlink()
        shutil.rmtree(base_known / "layers" / "blobs", ignore_errors=True)
        shutil.rmtree(work / "out-base", ignore_errors=True)
        based_s, based_rss, _ = build("out-base", base_known, "--base", f"oci:{base_dir}:base")
        zstd_s, zstd_rss, _ = build("out-zstd", work / "cache-zstd", "--compression", "zstd")
        cpus = len(os.sched_getaffinity(0))
        sha_s, sha_rss, sha_res = measured(["sha256sum", str(artifact)])
        gz_s, gz_rss, gz_res = measured(f"tar -cf - -C '{tree}' . | gzip -1 > /dev/null", shell=True)
        pigz_s = measured(f"tar -cf - -C '{tree}' . | pigz -1 -p {cpus} > /dev/null", shell=True)[0] \
            if shutil.which("pigz") else None
        tsha_s = measured(f"tar -cf - -C '{tree}' . | sha256sum > /dev/null", shell=True)[0]
        zst_s = measured(f"tar -cf - -C '{tree}' . | zstd -3 -T{cpus} -q > /dev/null", shell=True)[0] \
            if shutil.which("zstd") else None
        help_s = measured([*lp, "--help"], env0)[0]
        base_s = sha_s + gz_s
        warm_s, warm_rss, warm = build("out-warm", work / "cache")
        same = cold["indexes"] == warm["indexes"]
        ratio = cold_s / base_s
        ok = {"rss": max(cold_rss, based_rss, zstd_rss) < TARGETS["rss_mib"], "ratio": ratio <= TARGETS["ratio"],
              "warm": warm_s <= TARGETS["warm_s"], "base": based_s <= cold_s * TARGETS["base_ratio"]}
        mark = {k: "ok" if v else "MISSED" for k, v in ok.items()}
        print(f"content {ns.size_mib} MiB, artifact {artifact.stat().st_size / MIB:.1f} MiB, base layer "
              f"{sum(p.stat().st_size for p in (base_dir / 'blobs/sha256').iterdir()) / MIB:.1f} MiB; "
              f"load average {os.getloadavg()[0]:.1f} on {cpus} CPUs")
        print(f"cold build:            {cold_s:7.2f} s   peak RSS {cold_rss:6.1f} MiB   "
              f"[{mark['rss']}: < {TARGETS['rss_mib']:.0f} MiB]   (cpu {cpu['out-cold']:.2f} s)")
        print(f"baseline:              {base_s:7.2f} s   (sha256sum {sha_s:.2f} s + tar|gzip -1 {gz_s:.2f} s; "
              f"cpu {sha_res.cpu + gz_res.cpu:.2f} s)")
        print(f"ratio:                 {ratio:7.2f} x   [{mark['ratio']}: <= {TARGETS['ratio']} x]")
        print(f"  for reference:       tar|pigz -1 -p {cpus} {pigz_s if pigz_s is None else round(pigz_s, 2)} s, "
              f"tar|sha256sum {tsha_s:.2f} s, tar|zstd -3 -T{cpus} {zst_s if zst_s is None else round(zst_s, 2)} s, "
              f"lemonpack --help {help_s:.2f} s")
        print(f"with --base:           {based_s:7.2f} s   peak RSS {based_rss:6.1f} MiB   "
              f"({based_s / cold_s:.2f} x cold) [{mark['base']}: <= {TARGETS['base_ratio']} x cold]   "
              f"(cpu {cpu['out-base']:.2f} s)")
        print(f"  base first seen:     {first_s:7.2f} s   ({first_s / cold_s:.2f} x cold: its layer read once "
              f"for diff_id and whiteouts, then remembered)   (cpu {cpu['out-base-first']:.2f} s)")
        print(f"--compression zstd:    {zstd_s:7.2f} s   peak RSS {zstd_rss:6.1f} MiB   "
              f"({zstd_s / base_s:.2f} x baseline)   (cpu {cpu['out-zstd']:.2f} s)")
        print(f"warm build:            {warm_s:7.2f} s   peak RSS {warm_rss:6.1f} MiB   "
              f"[{mark['warm']}: <= {TARGETS['warm_s']} s]; same index digest: {same}   (cpu {cpu['out-warm']:.2f} s)")
        print("cpu of the reference pipelines: "
              + ", ".join(f"{k.split('|', 1)[-1].split('>')[0].strip()} {v:.2f} s" for k, v in CPU.items()
                          if "|" in k))
        return 0 if all(ok.values()) and same else 2
    finally:
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if not ns.keep and ns.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _support import run_recorded

    raise SystemExit(run_recorded("build", main))
