"""External tools the integration tests drive, and how a test demands one.

:func:`need` fails the test (it never skips) naming the Debian package, so a CI machine
whose install step went wrong goes red instead of quietly testing less.
:data:`CONTAINERS_CONF` is the podman configuration of the suite (tests/containers.conf).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

#: tool -> Debian package that provides it (scripts/test.sh installs them).
APT = {"nix-build": "nix-bin", "nix-store": "nix-bin", "nix-hash": "nix-bin", "nix": "nix-bin",
       "skopeo": "skopeo", "umoci": "umoci", "podman": "podman", "runc": "runc", "busybox": "busybox-static",
       "mmdebstrap": "mmdebstrap"}

CONTAINERS_CONF = (Path(__file__).resolve().parents[1] / "containers.conf").read_text()


def need(tool: str) -> str:
    """The path of ``tool``; fails the test naming the apt package when it is missing."""
    if tool == "busybox":
        if Path("/bin/busybox").is_file():
            return "/bin/busybox"
    else:
        path = shutil.which(tool)
        if path:
            return path
    pytest.fail(f"{tool} is not installed: apt-get install -y {APT.get(tool, tool)} (or run scripts/test.sh)")


def need_root() -> None:
    """Fail (never skip) a test that changes a file's owner (``chown`` to another uid) when
    the suite does not run as root; CI and ``scripts/test.sh`` run it as root."""
    import os

    if os.geteuid() != 0:
        pytest.fail("this test chowns a file to another uid: run the suite as root (as CI and scripts/test.sh do)")
