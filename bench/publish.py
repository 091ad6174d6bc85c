"""Publish and pull benchmark: lemonpack against skopeo on the same bytes, one run, side by side.

Builds an OCI layout with one gzip-compressed layer (``application/vnd.oci.image.layer.v1.tar+gzip``:
a tar holding SIZE MiB of random bytes, deflate level 0, so the blob is about SIZE MiB), then
times, each as a child process (peak RSS from wait4's rusage), against real docker-registry
instances on 127.0.0.1 (tests/support/registry.py):

  - push, each into a new, empty registry, in the order skopeo, lemonpack, lemonpack, skopeo:
    ``skopeo copy --preserve-digests oci:LAYOUT:bench docker://HOST/bench/app:v1`` (the
    compressed blob goes as it is, nothing is recompressed; skopeo hashes it as it sends) and
    ``lemonpack publish LAYOUT:bench --to HOST/bench/app:v1`` (same bytes sent: printed), then
    the same publish again (every blob there: time and bytes sent);
  - pull, from one registry, into a new directory each, in the order lemonpack, skopeo, skopeo,
    lemonpack: ``lemonpack pull HOST/bench/app:v1 --out DIR`` (every blob hashed once as it
    arrives) and ``skopeo copy --preserve-digests docker://HOST/bench/app:v1 oci:DIR:v1``.

The ratios are of the means of the two runs of each; the ABBA order spreads a machine getting
busier or quieter over both tools.

Bytes are counted on the registry's side too, not only by lemonpack: every push goes through a
counting TCP relay in front of its registry (tests/support/byte_relay.py: ``os.splice``, both
tools alike), whose client-to-registry count must be lemonpack's ``bytes_sent`` plus the HTTP
heads (at most 256 KiB over it); the pull registry writes its access log, whose blob ``GET``
answer sizes must equal lemonpack's ``bytes`` (and be 0 for the re-pull).

Both tools write to and read from the same registry, same layout, same compressed blob, so the
ratios compare like with like (an uncompressed layer would make skopeo gzip it on the way, and a
comparison would count that). Targets (issue 25): publish and pull <= 1.0x skopeo in wall time
and in CPU seconds (user + sys), peak RSS <= 40 MiB, re-pull into the same layout <= 0.1 s (median of five) with
0 blob bytes (also timed inside the process, after its imports), re-publish < 1 s with 0 blob
bytes; a missed target makes the exit code 2. Usage: python bench/publish.py [--size-mib N]

The lemonpack children run without PYTHONDONTWRITEBYTECODE (set in some dev shells and CI
images): an installed package has its bytecode compiled (pip does it at install), so the first
run writes it and the later runs measure what a user waits for, not the compilation of ~60
modules (~0.2-0.4 s here). The CLI's start-up alone (``lemonpack --help``) is printed too. The
machine may be shared: the figures are one run, printed with the load average before and after.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.byte_relay import ByteRelay  # noqa: E402
from support.registry import LocalRegistry, declare_insecure  # noqa: E402

from lemonpack.oci.mediatypes import MEDIA_TYPE_LAYER_TAR_GZIP  # noqa: E402
from lemonpack.oci.layout import LayoutWriter  # noqa: E402


class _Random(io.RawIOBase):
    """``size`` random bytes, read in whatever pieces tarfile asks for."""

    def __init__(self, size: int):
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self.left, 4 << 20)
        b[:n] = os.urandom(n)
        self.left -= n
        return n


def make_layout(path: Path, size_mib: int) -> int:
    """The layout at ``path`` (tag ``bench``); returns the compressed layer's size in bytes."""
    blob = path.parent / "layer.tar.gz"
    with open(blob, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=0, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("random.bin")
        info.size = size_mib << 20
        tf.addfile(info, io.BufferedReader(_Random(info.size), 4 << 20))
    with LayoutWriter(path) as lw:
        layer = lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP, blob)
        image = lw.add_image_manifest({"architecture": "amd64", "os": "linux"}, [layer], created=0)
        lw.set_tags({"bench": image})
    blob.unlink()
    return layer.size


CPU: dict[str, list[float]] = {}
#: Re-pulls timed; the median is the figure.
REPULLS = 5

#: A child that imports what ``lemonpack pull`` imports, then times the command itself (its
#: last line: seconds).
_INSIDE = """
import sys, time, io, contextlib
import lemonpack.cli, lemonpack.cli.registry_cmds, lemonpack.registry.transfer, lemonpack.trust.check
import lemonpack.httpclient
t0 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    code = 0
    try:
        lemonpack.cli.main(sys.argv[1:])
    except SystemExit as e:
        code = e.code
print(time.perf_counter() - t0)
sys.exit(code or 0)
"""


def run(argv: list[str], env: dict[str, str] | None = None, who: str | None = None) -> tuple[float, int, str]:
    """Run argv as a child (environment ``env``, default ours); (seconds, peak RSS in KiB of
    that child, stdout). ``who``: record the child's CPU seconds (user + sys) under that name."""
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
    if who is not None:
        CPU.setdefault(who, []).append(usage.ru_utime + usage.ru_stime)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[0]} exited {os.waitstatus_to_exitcode(status)}: {' '.join(argv)}")
    return elapsed, usage.ru_maxrss, b"".join(chunks).decode()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    args = ap.parse_args()
    load_before = os.getloadavg()
    from support.registry import install_registries_conf

    install_registries_conf()  # the local registries said insecure, as skopeo is told --*-tls-verify=false
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    lp = [sys.executable, "-m", "lemonpack.cli"]
    times: dict[str, list[float]] = {"skopeo push": [], "publish": [], "skopeo pull": [], "pull": []}
    rss: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="lemonpack-bench-publish-") as tmp:
        tmp = Path(tmp)
        layout = tmp / "layout"
        size = make_layout(layout, args.size_mib)

        wire: dict[str, list[int]] = {}  # bytes that reached the registry through the relay, per push

        def push(who: str, n: int) -> dict | None:
            # every push goes to a registry of its own, empty: no tool finds the blob there
            # already (skopeo would mount it from a repository where it saw it before); through a
            # counting relay, so the bytes that reached the registry are counted on its side
            with LocalRegistry(tmp / f"registry-{who}-{n}") as reg, ByteRelay(reg.host) as relay:
                declare_insecure(relay.host)
                if who == "skopeo push":
                    t, peak, _ = run(["skopeo", "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false",
                                      f"oci:{layout}:bench", f"docker://{relay.host}/bench/app:v1"], who=who)
                    out = None
                    wire.setdefault(who, []).append(relay.take()[0])
                else:
                    argv = [*lp, "publish", f"{layout}:bench", "--to", f"{relay.host}/bench/app:v1", "--json",
                            "--no-progress"]
                    t, peak, text = run(argv, env, who=who)
                    out = {"first": json.loads(text), "wire": relay.take()[0]}
                    wire.setdefault(who, []).append(out["wire"])
                    again, _, text = run(argv, env)
                    out.update(again=again, second=json.loads(text), wire_again=relay.take()[0])
            shutil.rmtree(tmp / f"registry-{who}-{n}")
            times[who].append(t)
            rss[who] = max(rss.get(who, 0), peak)
            return out

        # ABBA order, so that a machine getting busier or quieter during the run weighs on both
        push("skopeo push", 1)
        published = push("publish", 1)
        push("publish", 2)
        push("skopeo push", 2)
        served: dict[str, list[int]] = {}  # blob bytes the registry's access log says it sent, per pull
        with LocalRegistry(tmp / "registry-pull", access_log=True) as reg:
            run(["skopeo", "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false",
                 f"oci:{layout}:bench", f"docker://{reg.host}/bench/app:v1"])
            for n, who in enumerate(("pull", "skopeo pull", "skopeo pull", "pull")):
                out = tmp / f"pulled-{n}"
                if who == "pull":
                    argv, e = [*lp, "pull", f"{reg.host}/bench/app:v1", "--out", str(out), "--no-progress"], env
                else:
                    argv, e = ["skopeo", "copy", "--quiet", "--preserve-digests", "--src-tls-verify=false",
                               f"docker://{reg.host}/bench/app:v1", f"oci:{out}:v1"], None
                before = reg.served_blob_bytes()
                t, peak, text = run([*argv, "--json"] if who == "pull" else argv, e, who=who)
                served.setdefault(who, []).append(reg.served_blob_bytes() - before)
                if who == "pull":
                    pulled_bytes = json.loads(text)["bytes"]
                if n == 0:  # the same pull again into the layout it wrote: nothing to move
                    before = reg.served_blob_bytes()
                    repulls = []  # five runs: a 0.1 s figure on a shared machine is mostly its scheduler's
                    for _ in range(REPULLS):
                        took, _, text = run([*argv, "--json"], e, who="re-pull")
                        repulls.append(took)
                        repulled = json.loads(text)
                    repull = sorted(repulls)[len(repulls) // 2]
                    repull_served = reg.served_blob_bytes() - before
                    # the same once more, timed inside the process after its imports: what the
                    # pull itself costs, apart from Python's and the libraries' start-up
                    _, _, text = run([sys.executable, "-c", _INSIDE, *argv[3:], "--json"], e)
                    inside = float(text.strip().splitlines()[-1])
                shutil.rmtree(out)
                times[who].append(t)
                rss[who] = max(rss.get(who, 0), peak)
        start_up, _, _ = run([*lp, "--help"], env)
    load_after = os.getloadavg()

    def mean(who: str) -> float:
        return sum(times[who]) / len(times[who])

    def cpu(who: str) -> float:
        return sum(CPU[who]) / len(CPU[who])

    def line(label: str, who: str) -> str:
        runs = " / ".join(f"{t:.2f}" for t in times[who])
        return (f"{label:<40} {mean(who):7.2f} s (runs {runs})   CPU {cpu(who):6.2f} s   "
                f"peak RSS {rss[who] / 1024:6.1f} MiB")

    sent = published["first"]["bytes_sent"]
    print(f"layout: one {MEDIA_TYPE_LAYER_TAR_GZIP} layer of {size / (1 << 20):.1f} MiB "
          f"({args.size_mib} MiB of random bytes); lemonpack publish sent {sent} blob bytes (layer + config)")
    missed: list[str] = []
    # the registry's side: what reached it through the relay (HTTP heads included: at most a few
    # KiB per request above the blob bytes) and what its access log says it served
    heads = published["wire"] - sent
    wire_ok = 0 <= heads <= 256 << 10
    if not wire_ok:
        missed.append("push bytes on the wire")
    print(f"bytes at the registry (a counting relay in front of it): lemonpack publish {published['wire']} "
          f"(its own count {sent} + {heads} bytes of HTTP heads: {'agree' if wire_ok else 'DISAGREE'}), "
          f"re-publish {published['wire_again']}; skopeo push {' / '.join(str(b) for b in wire['skopeo push'])}")
    print(line("skopeo copy --preserve-digests (push)", "skopeo push"))
    print(line("lemonpack publish", "publish"))

    def target(ok: bool, what: str) -> str:
        if not ok:
            missed.append(what)
        return "[ok]" if ok else "[MISSED]"

    def ratios(who: str, skopeo: str) -> str:
        wall, cpu_ratio = mean(who) / mean(skopeo), cpu(who) / cpu(skopeo)
        return (f"{wall:.2f}x wall {target(wall <= 1.0, who + ' wall')}, {cpu_ratio:.2f}x CPU "
                f"{target(cpu_ratio <= 1.0, who + ' CPU')} (targets <= 1.0x each)")

    print(f"  ratio publish/skopeo: {ratios('publish', 'skopeo push')}")
    print(line("lemonpack pull", "pull"))
    print(line("skopeo copy --preserve-digests (pull)", "skopeo pull"))
    print(f"  ratio pull/skopeo: {ratios('pull', 'skopeo pull')}")
    log_ok = all(b == pulled_bytes for b in served["pull"]) and repull_served == 0 == repulled["bytes"]
    if not log_ok:
        missed.append("pull bytes in the registry's log")
    print(f"blob bytes the registry's access log says it served: lemonpack pull "
          f"{' / '.join(str(b) for b in served['pull'])} (its own count {pulled_bytes}: "
          f"{'agree' if log_ok else 'DISAGREE'}), re-pull {repull_served}; skopeo pull "
          f"{' / '.join(str(b) for b in served['skopeo pull'])}")
    peak = max(rss["publish"], rss["pull"]) / 1024
    print(f"peak RSS of lemonpack: {peak:.1f} MiB {target(peak <= 40, 'peak RSS')} (target <= 40 MiB)")
    print(f"re-pull into the same layout: {repull:.2f} s {target(repull <= 0.1, 're-pull time')} (target <= 0.1 s; "
          f"median of {REPULLS}: {' / '.join(f'{t:.2f}' for t in repulls)}; CPU median "
          f"{sorted(CPU['re-pull'])[REPULLS // 2]:.2f} s), "
          f"{repulled['bytes']} blob bytes downloaded {target(repulled['bytes'] == 0, 're-pull bytes')}, "
          f"{repulled['blobs_reused']} blobs already there (checked); inside the process after its imports "
          f"{inside:.3f} s")
    second = published["second"]
    print(f"re-publish: {published['again']:.2f} s, {second['bytes_sent']} blob bytes sent, "
          f"{second['blobs_skipped']} blobs already there (target < 1 s, 0 bytes); "
          f"CLI start-up alone (lemonpack --help) {start_up:.2f} s")
    print(f"load average (1/5/15 min) before {' '.join(f'{x:.1f}' for x in load_before)}, "
          f"after {' '.join(f'{x:.1f}' for x in load_after)} on {os.cpu_count()} CPUs")
    if missed:
        print(f"missed: {', '.join(missed)}")
    return 2 if missed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _support import run_recorded

    raise SystemExit(run_recorded("publish", main))
