"""Helpers for runtime tests: free ports, hand-made launch plans for the fake engine,
and process checks through ``/proc``."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

from lemonpack.contract.model import HealthProbe
from lemonpack.runtime.engines import pid_alive
from lemonpack.runtime.plan import LaunchPlan

FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
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


def all_gone(pids) -> bool:
    """True when none of ``pids`` is alive (zombies count as gone)."""
    return not any(pid_alive(p) for p in pids)
