"""What the benchmarks need, from a plain install (``pip install -e .``, no test extras, no pytest).

Every bench prints its figures and writes them into its own section of ``bench/RESULTS.md``
(:func:`record`, or :func:`run_recorded` around a bench's ``main``; ``LEMONPACK_BENCH_RESULTS``
names another file): the figures, the command
line (so the sizes used), the date, the machine (cores, load average) and the git commit.

The fake engine is ``tests/support/fake_engine.py``, a standard-library script the benchmark
runs as a subprocess (never imports). The container image is a busybox rootfs imported with
``podman import`` under a unique name, removed by :func:`remove_image`.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import os
import re
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from lemonpack.contract.model import HealthProbe
from lemonpack.files import locked, replace_file
from lemonpack.runtime.engines.proctable import pid_alive
from lemonpack.runtime.launch.plan import LaunchPlan

ROOT = Path(__file__).resolve().parents[1]
FAKE_ENGINE = ROOT / "tests" / "support" / "fake_engine.py"
CONTAINERS_CONF = ROOT / "tests" / "containers.conf"  # podman settings this kind of host needs (runc, ulimits)
BUSYBOX = Path("/bin/busybox")
RESULTS = ROOT / "bench" / "RESULTS.md"
#: The sections of RESULTS.md, in the file's order (one per bench script, named after it).
SECTIONS = ("build", "catalogue", "catalogue_site", "extensions", "gateway", "kube", "lifecycle", "lint", "models",
            "proxy", "publish", "startup")
RESULTS_HEAD = """# Benchmark results

Written by the benches themselves (`bench/_support.py`'s `record`): each `python3 bench/<name>.py`
replaces its own section below with the figures it printed, the command line (so the sizes
used), the date, the machine and the git commit. Do not edit by hand; run the bench again.
Wall times on this shared 2-core machine move with its load: compare the ratios each bench
measures against a baseline in the same run.
"""
HEALTH_CGI = b"""#!/bin/sh
if [ -f /tmp/ready ]; then
  printf 'Status: 200 OK\\r\\nContent-Type: text/plain\\r\\n\\r\\nok\\n'
else
  printf 'Status: 503 Service Unavailable\\r\\nContent-Type: text/plain\\r\\n\\r\\nloading\\n'
fi
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_plan(*flags: str, probe: HealthProbe | None = None) -> LaunchPlan:
    """A launch plan running the fake engine with ``flags`` on a free port."""
    port = free_port()
    argv = (sys.executable, str(FAKE_ENGINE), "--port", str(port), "--model", "fake", *flags)
    return LaunchPlan(recipe="fake", model="fake", executable=argv[0], argv=argv, host="127.0.0.1", port=port,
                      health_probe=probe or HealthProbe(type="http", endpoint="/health", expected_status=200,
                                                        timeout_seconds=20, poll_interval_ms=20))


def read_pids(path: Path) -> dict[str, int]:
    """``role -> pid`` from a fake engine ``--pid-file``."""
    if not path.exists():
        return {}
    return {role: int(pid) for role, pid in (line.split() for line in path.read_text().splitlines())}


def all_gone(pids) -> bool:
    """True when none of ``pids`` is alive (zombies count as gone)."""
    return not any(pid_alive(p) for p in pids)


def podman_usable() -> str | None:
    """Why the container figure cannot be measured here (None: it can)."""
    import shutil

    if os.geteuid() != 0:
        return "podman works here only as root"
    for tool in ("podman", "runc"):
        if not shutil.which(tool):
            return f"{tool} not installed"
    return None if BUSYBOX.is_file() else "busybox-static not installed"


def import_image(directory: Path) -> tuple[str, str]:
    """``podman import`` a busybox rootfs with the health CGI; returns ``(name@digest, name:tag)``."""
    tar_path = directory / "rootfs.tar"
    bb = BUSYBOX.read_bytes()

    def info(name: str, **kw) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.mtime = 0
        for k, v in kw.items():
            setattr(ti, k, v)
        return ti
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tf:
        for d in ("bin", "tmp", "www", "www/cgi-bin"):
            tf.addfile(info(d, type=tarfile.DIRTYPE, mode=0o1777 if d == "tmp" else 0o755))
        tf.addfile(info("bin/busybox", size=len(bb), mode=0o755), io.BytesIO(bb))
        for applet in ("sh", "httpd", "sleep", "touch"):
            tf.addfile(info(f"bin/{applet}", type=tarfile.SYMTYPE, linkname="busybox", mode=0o777))
        tf.addfile(info("www/cgi-bin/health", size=len(HEALTH_CGI), mode=0o755), io.BytesIO(HEALTH_CGI))
    name = f"localhost/lemonpack-bench-{os.urandom(4).hex()}"
    tag = f"{name}:bench"
    subprocess.run(["podman", "import", str(tar_path), tag], check=True, capture_output=True, timeout=120)
    digest = subprocess.run(["podman", "image", "inspect", tag, "--format", "{{.Digest}}"], check=True,
                            capture_output=True, text=True, timeout=60).stdout.strip()
    return f"{name}@{digest}", tag


def remove_image(tag: str) -> None:
    """``podman rmi -f tag``."""
    subprocess.run(["podman", "rmi", "-f", tag], capture_output=True, timeout=120)


def serve_argv(image: str, name: str, port: int, delay: float = 1.0) -> tuple[str, ...]:
    """A ``podman run`` argv serving the health CGI of :func:`import_image` on 127.0.0.1:``port``."""
    script = f"(sleep {delay}; touch /tmp/ready) & exec /bin/busybox httpd -f -p 127.0.0.1:{port} -h /www"
    return ("podman", "run", "--rm", "--name", name, "--network", "host", image, "/bin/sh", "-c", script)


def best(fn, repeat: int) -> float:
    """Best wall time of ``repeat`` calls of ``fn`` (seconds): the figure least disturbed by
    other work on the machine."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)



# ---------------------------------------------------------------- RESULTS.md


def _markers(section: str) -> tuple[str, str]:
    return f"<!-- bench:{section} start -->", f"<!-- bench:{section} end -->"


def not_run(section: str) -> str:
    """The body of a section no run has written yet."""
    return f"## {section}\n\nnot run yet: run `python3 bench/{section}.py`\n"


def git_commit(root: Path = ROOT) -> str:
    """``git rev-parse --short HEAD`` of ``root``, ``+ local changes`` when tracked files differ
    from it; ``unknown`` outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD", "--"], capture_output=True,
                               timeout=30).returncode != 0
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + (" + local changes" if dirty else "")


def machine() -> str:
    """``N cores (CPU model), load average a b c`` of this machine, now."""
    model = ""
    with contextlib.suppress(OSError):
        model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                      if line.startswith("model name")), "")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} cores{f' ({model})' if model else ''}, load average {load}"


def render_rows(rows: Sequence[str | Sequence[object]]) -> str:
    """Rows as Markdown: plain strings (lines a bench printed) in one fenced block, keeping
    their alignment; tuples as a table whose first tuple is the header."""
    if all(isinstance(r, str) for r in rows):
        return "```\n" + "\n".join(str(r).rstrip() for r in rows) + "\n```\n"
    cells = [[str(c).replace("|", "\\|") for c in r] for r in rows]
    out = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(cells[0])]
    out += ["| " + " | ".join(r) + " |" for r in cells[1:]]
    return "\n".join(out) + "\n"


def replace_section(text: str, section: str, body: str, order: Sequence[str] = SECTIONS) -> str:
    """``text`` (RESULTS.md) with ``section``'s part between its markers replaced by ``body``;
    every other section kept byte for byte. A section not there yet goes before the first
    section that follows it in ``order`` (else at the end)."""
    start, end = _markers(section)
    block = f"{start}\n{body.rstrip()}\n{end}\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end) + r"\n?", re.S)
    if pattern.search(text):
        return pattern.sub(lambda _: block, text, count=1)
    later = list(order)[list(order).index(section) + 1:] if section in order else []
    for other in later:
        pos = text.find(_markers(other)[0])
        if pos >= 0:
            return text[:pos] + block + "\n" + text[pos:]
    return text.rstrip("\n") + "\n\n" + block


def results_path() -> Path:
    """``bench/RESULTS.md``, or the file ``LEMONPACK_BENCH_RESULTS`` names (tests that run a
    bench at a toy size write there, not over the real figures)."""
    return Path(os.environ.get("LEMONPACK_BENCH_RESULTS") or RESULTS)


def record(section: str, rows: Sequence[str | Sequence[object]], note: str = "", *,
           path: Path | None = None, when: datetime.datetime | None = None) -> None:
    """Write ``rows`` (:func:`render_rows`) as ``section`` of ``path`` (``bench/RESULTS.md``),
    headed by the date, :func:`machine`, :func:`git_commit` and ``note`` (what was run: say
    the sizes). Only that section changes; the file is replaced atomically
    (:func:`lemonpack.files.replace_file`) under a lock beside it, so two benches finishing
    together both land. A missing file starts with every section "not run yet"."""
    path = path or results_path()
    when = when or datetime.datetime.now(datetime.timezone.utc)
    head = (f"## {section}\n\n{when:%Y-%m-%d %H:%M} UTC · {machine()} · commit {git_commit()}\n\n"
            + (f"{note.strip()}\n\n" if note.strip() else ""))
    with locked(path.with_name(f".{path.name}.lock")):
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = RESULTS_HEAD + "".join(f"\n{_markers(s)[0]}\n{not_run(s)}{_markers(s)[1]}\n" for s in SECTIONS)
        replace_file(path, replace_section(text, section, head + render_rows(rows)).encode())


class _Tee(io.TextIOBase):
    """Writes through to ``out`` and keeps every complete line."""

    def __init__(self, out):
        self.out, self.lines, self._part = out, [], ""

    def write(self, s: str) -> int:
        self.out.write(s)
        self._part += s
        *done, self._part = self._part.split("\n")
        self.lines += done
        return len(s)

    def flush(self) -> None:
        self.out.flush()


def run_recorded(section: str, main: Callable[[], int | None], note: str = "") -> int:
    """Run a bench's ``main()`` printing as usual, then :func:`record` what it printed on
    stdout as ``section`` (with the command line, so the sizes used, and ``note``). A run
    that returns is recorded, a non-zero code too (a bench returns 1 or 2 when a target is
    missed or something was left running: the note says so); a run that raises (a crash,
    ``SystemExit`` from argparse or a bench giving up) records nothing and says so on stderr.
    Returns the exit code."""
    tee = _Tee(sys.stdout)
    try:
        with contextlib.redirect_stdout(tee):
            rc = main() or 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
        if code:
            print(f"{section}: exited with {e.code!r}, {results_path()} not updated", file=sys.stderr)
        return code
    except BaseException:
        print(f"{section}: failed, {results_path()} not updated", file=sys.stderr)
        raise
    lines = tee.lines + ([tee._part] if tee._part else [])
    command = " ".join(["python3", f"bench/{section}.py", *sys.argv[1:]])
    sizes = "" if sys.argv[1:] else " (its default sizes)"
    status = f"; exit code {rc} (a target missed or a check failed: see the figures)" if rc else ""
    record(section, lines, f"`{command}`{sizes}{status}" + (f"; {note}" if note else ""))
    print(f"figures written to {results_path()} ({section})", file=sys.stderr)
    return rc


# ---------------------------------------------------------------- printing shared by proxy.py and gateway.py


def print_latencies(lat: dict[str, list[float]], requests: int, pct: Callable[[list[float], float], float],
                    width: int) -> dict[str, tuple[float, float]]:
    """Print the machine line and the small-POST p50/p99 of each target (``lat``: seconds per
    request); return ``{target: (p50, p99)}`` in seconds."""
    print(f"machine: {machine()}")
    print(f"small POST, {requests} sequential requests per target after 200 warm-up (keep-alive, interleaved):")
    p = {k: (pct(v, 50), pct(v, 99)) for k, v in lat.items()}
    for k, (p50, p99) in p.items():
        print(f"  {k:{width}s} p50 {us(p50)}   p99 {us(p99)}")
    return p


def us(seconds: float) -> str:
    """``seconds`` as right-aligned microseconds (``"     123 us"``)."""
    return f"{seconds * 1e6:8.0f} us"


def ms(seconds: float) -> str:
    """``seconds`` as right-aligned milliseconds with two decimals."""
    return f"{seconds * 1e3:8.2f} ms"
