#!/usr/bin/env python3
"""Benchmark the start-up of quick ``lemonpack`` commands (a script, not a test).

Measured, each the median (p50) of ``--repeat`` runs of a new process with this interpreter
(``sys.executable``) and the code it imports (``PYTHONPATH`` is kept): what the ``lemonpack``
console script runs (``from lemonpack.cli import main; sys.exit(main())``) with

- ``--help``: the root help page (every command module is imported for it);
- ``catalogue search llama``: a search of the shipped index (no ``--index``; the cache
  directory is a fresh empty one, so the shipped index is what it reads);
- ``--version``.

The baseline, in the same run and interleaved with the commands (round by round, so a burst
of load on the shared machine hits all of them alike): ``python -c pass`` with the same
interpreter and environment, i.e. the interpreter's own start-up and ``site`` (``.pth``
files of the installation). The ratio is command / baseline; "over" is the difference, what
lemonpack itself costs. CPU time (user + sys of the child, median) is printed too: wall time
on a loaded machine is mostly waiting for a core.

Bytecode: an installed lemonpack has its ``.pyc`` files (pip compiles them at install), so
the runs use bytecode caches, kept in a temporary ``PYTHONPYCACHEPREFIX`` (filled by a
warm-up run; the source tree is not written to). ``--no-bytecode-cache`` measures instead
what a shell with ``PYTHONDONTWRITEBYTECODE=1`` sees with the editable install: every
lemonpack module compiled from source on every run.

Target: ``--help`` and ``catalogue search`` at most 100 ms p50 on the development machine
(docs/architecture.md, "Start-up").

Usage: ``python bench/startup.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "import sys; from lemonpack.cli import main; sys.exit(main())"
COMMANDS = {
    "python -c pass (baseline)": None,
    "lemonpack --help": ["--help"],
    "lemonpack catalogue search llama": ["catalogue", "search", "llama"],
    "lemonpack --version": ["--version"],
}
TARGET_S = 0.100
TARGETED = ("lemonpack --help", "lemonpack catalogue search llama")


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv``; exits when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{argv} failed ({r.returncode}): {r.stderr.decode(errors='replace')}")
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="compile every module from source on every run (PYTHONDONTWRITEBYTECODE=1)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="lemonpack-bench-startup-") as tmp:
        env = {**os.environ, "LEMONPACK_CACHE_DIR": str(Path(tmp) / "cache"),
               "LEMONPACK_CONFIG_DIR": str(Path(tmp) / "config"),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        if args.no_bytecode_cache:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        argvs = {name: [sys.executable, "-c", "pass"] if words is None else [sys.executable, "-c", ENTRY, *words]
                 for name, words in COMMANDS.items()}
        for argv in argvs.values():  # warm the page cache and the bytecode caches
            _run(argv, env)
        wall: dict[str, list[float]] = {name: [] for name in argvs}
        cpu: dict[str, list[float]] = {name: [] for name in argvs}
        for _ in range(args.repeat):
            for name, argv in argvs.items():
                w, c = _run(argv, env)
                wall[name].append(w)
                cpu[name].append(c)

    p50 = {name: statistics.median(v) for name, v in wall.items()}
    cpu50 = {name: statistics.median(v) for name, v in cpu.items()}
    base = p50["python -c pass (baseline)"]
    caches = "no bytecode caches" if args.no_bytecode_cache else "bytecode caches warm"
    print(f"start-up, p50 of {args.repeat} runs each (interleaved, {caches}), {sys.executable}:")
    for name in argvs:
        line = f"  {name:34s} {p50[name] * 1000:6.0f} ms   CPU {cpu50[name] * 1000:4.0f} ms"
        if name != "python -c pass (baseline)":
            line += f"   {p50[name] / base:4.2f}x baseline, over it {(p50[name] - base) * 1000:4.0f} ms"
        if name in TARGETED:
            line += f"   target <= {TARGET_S * 1000:.0f} ms: {'met' if p50[name] <= TARGET_S else 'NOT met'}"
        print(line)
    print(f"  load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall time grows with the load)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _support import run_recorded

    raise SystemExit(run_recorded("startup", main))
