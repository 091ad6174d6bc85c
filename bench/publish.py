"""Publish benchmark: lemonpack publish vs skopeo copy oci:... docker://..., one run.

Builds an OCI layout with one layer of SIZE MiB of random bytes (default 1024), starts a real
docker-registry on 127.0.0.1 (tests/support/registry.py), then times:
  1. skopeo copy oci:LAYOUT:bench docker://HOST/skopeo/bench:v1 (baseline, same registry);
  2. lemonpack publish LAYOUT:bench --to HOST/lemonpack/bench:v1 (a child process; its peak RSS
     from wait4's rusage);
  3. the same lemonpack publish again (every blob there: time and bytes sent).
Prints the figures and the ratio. Targets: <= 1.2x skopeo, peak RSS < 200 MiB, re-publish < 1 s
with 0 layer bytes. Usage: python bench/publish.py [--size-mib N]

The lemonpack children run without PYTHONDONTWRITEBYTECODE (set in some dev shells and CI
images): an installed package has its bytecode compiled (pip does it at install), so the first
run writes it and the re-publish measures what a user waits for, not the compilation of ~60
modules (~0.2-0.4 s here). The CLI's start-up alone (``lemonpack --help``) is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.registry import LocalRegistry  # noqa: E402

from lemonpack.oci.layout import LayoutWriter  # noqa: E402


def make_layout(path: Path, size_mib: int) -> None:
    blob = path.parent / "layer.bin"
    with open(blob, "wb") as f:
        for _ in range(size_mib):
            f.write(os.urandom(1 << 20))
    with LayoutWriter(path) as lw:
        layer = lw.add_blob_file("application/vnd.oci.image.layer.v1.tar", blob)
        image = lw.add_image_manifest({"architecture": "amd64", "os": "linux"}, [layer], created=0)
        lw.set_tags({"bench": image})
    blob.unlink()


def run(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """Run argv as a child (environment ``env``, default ours); (seconds, peak RSS in KiB of
    that child, stdout)."""
    t0 = time.perf_counter()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.execvpe(argv[0], argv, env if env is not None else os.environ)
    os.close(w)
    chunks = []
    while data := os.read(r, 65536):
        chunks.append(data)
    os.close(r)
    _, status, usage = os.wait4(pid, 0)
    elapsed = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[0]} exited {os.waitstatus_to_exitcode(status)}")
    return elapsed, usage.ru_maxrss, b"".join(chunks).decode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lemonpack-bench-publish-") as tmp:
        tmp = Path(tmp)
        layout = tmp / "layout"
        make_layout(layout, args.size_mib)
        with LocalRegistry(tmp / "registry") as reg:
            sk, sk_rss, _ = run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false",
                                 f"oci:{layout}:bench", f"docker://{reg.host}/skopeo/bench:v1"])
            lp_cmd = [sys.executable, "-m", "lemonpack.cli", "publish", f"{layout}:bench", "--to",
                      f"{reg.host}/lemonpack/bench:v1", "--json", "--no-progress"]
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            lp, lp_rss, _ = run(lp_cmd, env)
            again, _, out = run(lp_cmd, env)
            second = json.loads(out)
            start_up, _, _ = run([sys.executable, "-m", "lemonpack.cli", "--help"], env)
    print(f"layout: one {args.size_mib} MiB layer")
    print(f"skopeo copy:        {sk:8.2f} s   peak RSS {sk_rss / 1024:7.1f} MiB")
    print(f"lemonpack publish:  {lp:8.2f} s   peak RSS {lp_rss / 1024:7.1f} MiB")
    print(f"ratio lemonpack/skopeo: {lp / sk:.2f}x (target <= 1.2x)")
    print(f"re-publish: {again:.2f} s, {second['bytes_sent']} blob bytes sent, "
          f"{second['blobs_skipped']} blobs already there (target < 1 s, 0 bytes); "
          f"CLI start-up alone (lemonpack --help) {start_up:.2f} s")


if __name__ == "__main__":
    main()
