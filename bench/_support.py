"""What the benchmarks need, from a plain install (``pip install -e .``, no test extras, no pytest).

The fake engine is ``tests/support/fake_engine.py``, a standard-library script the benchmark
runs as a subprocess (never imports). The container image is a busybox rootfs imported with
``podman import`` under a unique name, removed by :func:`remove_image`.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from lemonpack.contract.model import HealthProbe
from lemonpack.runtime.proctable import pid_alive
from lemonpack.runtime.plan import LaunchPlan

ROOT = Path(__file__).resolve().parents[1]
FAKE_ENGINE = ROOT / "tests" / "support" / "fake_engine.py"
CONTAINERS_CONF = ROOT / "tests" / "containers.conf"  # podman settings this kind of host needs (runc, ulimits)
BUSYBOX = Path("/bin/busybox")
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

