"""A tiny busybox image for container tests, imported into podman's default storage.

The rootfs holds ``/bin/busybox`` (+ ``sh``, ``httpd``, ``sleep``, ``touch`` links) and a
CGI ``/www/cgi-bin/health`` that answers 503 until ``/tmp/ready`` exists, then 200. The
image is referenced by digest (``localhost/lemonpack-test-bb@sha256:...``). podman runs
here only as root with a containers.conf asking for runc and modest ulimits:
:func:`containers_conf` writes one and the caller sets ``CONTAINERS_CONF``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
"""
BUSYBOX = Path("/bin/busybox")
IMAGE_NAME = "localhost/lemonpack-test-bb"
HEALTH_CGI = """#!/bin/sh
if [ -f /tmp/ready ]; then
  printf 'Status: 200 OK\\r\\nContent-Type: text/plain\\r\\n\\r\\nok\\n'
else
  printf 'Status: 503 Service Unavailable\\r\\nContent-Type: text/plain\\r\\n\\r\\nloading\\n'
fi
"""


def podman_usable() -> str | None:
    """Why podman cannot be used here (None: it can)."""
    if os.geteuid() != 0:
        return "podman works here only as root"
    for tool in ("podman", "runc"):
        if not shutil.which(tool):
            return f"{tool} not installed"
    if not BUSYBOX.is_file():
        return "busybox-static not installed"
    return None


def containers_conf(directory: Path) -> Path:
    """Write the containers.conf podman needs here; return its path."""
    path = directory / "containers.conf"
    path.write_text(CONTAINERS_CONF)
    return path


def rootfs_tar(directory: Path) -> Path:
    """A deterministic rootfs tar with busybox and the health CGI."""
    tar_path = directory / "rootfs.tar"

    def info(name: str, **kw) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(name)
        ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = 0, 0, 0, "", ""
        for k, v in kw.items():
            setattr(ti, k, v)
        return ti
    bb = BUSYBOX.read_bytes()
    cgi = HEALTH_CGI.encode()
    import io
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tf:
        for d in ("bin", "tmp", "www", "www/cgi-bin"):
            tf.addfile(info(d, type=tarfile.DIRTYPE, mode=0o1777 if d == "tmp" else 0o755))
        tf.addfile(info("bin/busybox", size=len(bb), mode=0o755), io.BytesIO(bb))
        for applet in ("sh", "httpd", "sleep", "touch", "cat"):
            tf.addfile(info(f"bin/{applet}", type=tarfile.SYMTYPE, linkname="busybox", mode=0o777))
        tf.addfile(info("www/cgi-bin/health", size=len(cgi), mode=0o755), io.BytesIO(cgi))
    return tar_path


def import_image(directory: Path, env: dict) -> str:
    """``podman import`` the rootfs; return ``IMAGE_NAME@sha256:<manifest digest>``."""
    tar_path = rootfs_tar(directory)
    tag = f"{IMAGE_NAME}:test"
    subprocess.run(["podman", "import", str(tar_path), tag], env=env, check=True, capture_output=True, timeout=120)
    digest = subprocess.run(["podman", "image", "inspect", tag, "--format", "{{.Digest}}"], env=env, check=True,
                            capture_output=True, text=True, timeout=60).stdout.strip()
    return f"{IMAGE_NAME}@{digest}"


def serve_argv(image: str, name: str, port: int, delay: float = 1.0, runtime: str = "podman") -> tuple[str, ...]:
    """A seed-13.2-shaped ``podman run`` argv serving the health CGI on 127.0.0.1:port;
    the CGI answers 503 for ``delay`` seconds."""
    script = f"(sleep {delay}; touch /tmp/ready) & exec /bin/busybox httpd -f -p 127.0.0.1:{port} -h /www"
    return (runtime, "run", "--rm", "--name", name, "--network", "host", image, "/bin/sh", "-c", script)
