"""Helpers for the runtime and server tests: free and closed ports, hand-made launch plans for the
fake engine, ``lemonpack run`` as a child (:class:`RunProcess`), process checks through ``/proc``,
a fake clock, a static file server, cache entries reshaped."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

from lemonpack.contract.model import HealthProbe
from lemonpack.runtime.engines.proctable import pid_alive
from lemonpack.runtime.launch.plan import LaunchPlan
from support.interrupt import popen_interruptible
from support.recipes import FAKE_ENGINE


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_plan(*flags: str, port: int | None = None, probe: HealthProbe | None = None, model: str = "fake",
              stop_argv: tuple[str, ...] | None = None, env: dict | None = None) -> LaunchPlan:
    """A launch plan running the fake engine with ``flags`` on ``port`` (a free one)."""
    port = port or free_port()
    argv = (sys.executable, str(FAKE_ENGINE), "--port", str(port), "--model", model, *flags)
    return LaunchPlan(recipe="fake", model=model, executable=argv[0], argv=argv, env=env or {},
                      host="127.0.0.1", port=port,
                      health_probe=probe or HealthProbe(type="http", endpoint="/health", expected_status=200,
                                                        timeout_seconds=20, poll_interval_ms=20),
                      stop_argv_template=stop_argv)


def read_pids(path: Path) -> dict[str, int]:
    """``role -> pid`` from a fake engine ``--pid-file``."""
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            role, pid = line.split()
            out[role] = int(pid)
    return out


def wait_for(pred, timeout: float = 10.0, interval: float = 0.02) -> bool:
    """Poll ``pred()`` until true; False after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())


class FakeClock:
    """A monotonic clock that moves only when told, for code that takes ``clock=`` (and
    ``sleep=``): ``clock()`` reads it (seconds), ``advance(s)`` and ``sleep(s)`` move it on
    and never block. ``slept`` lists every ``sleep`` asked for."""

    def __init__(self, start: float = 1000.0):
        self.now = start
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += max(seconds, 0.0)


def all_gone(pids) -> bool:
    """True when none of ``pids`` is alive (zombies count as gone)."""
    return not any(pid_alive(p) for p in pids)


class RunProcess:
    """``lemonpack run ...`` in a subprocess; ``wait_line(prefix)`` reads stdout until a line
    starts with ``prefix`` (stderr is collected in a thread)."""

    def __init__(self, args: list[str], env: dict | None = None):
        import os
        import subprocess
        import threading

        self.proc = popen_interruptible(  # the tests stop it with SIGINT (support.interrupt)
            [sys.executable, "-c", "from lemonpack.cli import main; main()", "run", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONFAULTHANDLER": "1", **(env or {})})
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._err = threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True)
        self._err.start()

    def wait_line(self, prefix: str, timeout: float = 30.0) -> str | None:
        import threading

        found: list[str] = []

        def read():
            for line in self.proc.stdout:
                self.stdout.append(line)
                if line.startswith(prefix):
                    found.append(line.strip())
                    return
        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout)
        return found[0] if found else None

    def finish(self, timeout: float = 30.0) -> int:
        """The exit code; a run still alive after ``timeout`` seconds fails the test with its
        stderr and every thread's stack (SIGABRT makes faulthandler print them)."""
        import signal
        import subprocess

        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)
            self.proc.wait(10)
            self._err.join(5)
            raise AssertionError(f"lemonpack run still running after {timeout} s:\n{self.err}") from None
        self._err.join(5)
        rest = self.proc.stdout.read()
        if rest:
            self.stdout.append(rest)
        return rc

    @property
    def err(self) -> str:
        return "".join(self.stderr)


class serve_directory:  # noqa: N801 (a context manager used like a function)
    """``with serve_directory(root) as base_url:`` a ThreadingHTTPServer on 127.0.0.1 serving
    ``root`` (static files), stopped on exit."""

    def __init__(self, root: Path):
        import functools
        import http.server

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))

    def __enter__(self) -> str:
        import threading

        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


#: The shapes a cache entry can be turned into by :func:`reshape_entry`.
ENTRY_SHAPES = ("directory", "symlink", "symlink-to-dir", "fifo")


def reshape_entry(entry, kind: str, outside) -> None:
    """Replace the cache file ``entry`` by something that is not a regular file: a
    ``directory`` holding its bytes, a ``symlink`` to a good copy at ``outside``, a
    ``symlink-to-dir`` (``outside`` a directory), or a ``fifo``."""
    import os

    good = entry.read_bytes()
    entry.chmod(0o644)
    entry.unlink()
    if kind == "directory":
        entry.mkdir()
        (entry / "inner").write_bytes(good)
    elif kind == "symlink":
        outside.write_bytes(good)
        entry.symlink_to(outside)
    elif kind == "symlink-to-dir":
        outside.mkdir()
        (outside / "keep").write_bytes(b"k")
        entry.symlink_to(outside)
    elif kind == "fifo":
        os.mkfifo(entry)
    else:
        raise ValueError(kind)
