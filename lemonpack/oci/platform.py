"""OCI platform names of the machine lemonpack runs on (image-spec config.md, image-index.md).

An image config's ``architecture`` and ``os`` and an index entry's ``platform`` use Go's
``GOARCH``/``GOOS`` names (``amd64``, ``arm64``, ``linux``); Python reports the kernel's
(``platform.machine()``: ``x86_64``, ``aarch64``; ``sys.platform``: ``linux``, ``darwin``).
This module asks the executable-header primitive's table (:mod:`lemonpack.exe_header`) for the mapping: every room that needs "this machine's
architecture" as an OCI name (the builder's default ``--cpu-arch``, release images, base
image selection) asks :func:`host_platform`.
"""

from __future__ import annotations

import platform
import sys

# the architecture names and the kernel's spellings are the executable-header primitive's table
from lemonpack.exe_header import GOARCH, OCI_ARCHITECTURES, goarch

#: ``sys.platform`` -> GOOS.
GOOS = {"linux": "linux", "darwin": "darwin", "win32": "windows", "cygwin": "windows"}


def host_arch() -> str:
    """This machine's OCI ``architecture`` (``amd64``, ``arm64`` ...)."""
    return goarch(platform.machine())


def host_os() -> str:
    """This machine's OCI ``os`` (``linux``, ``darwin``, ``windows``)."""
    return GOOS.get(sys.platform, sys.platform)


def host_platform() -> tuple[str, str]:
    """``(os, architecture)`` of this machine in OCI names, e.g. ``("linux", "amd64")``."""
    return host_os(), host_arch()


__all__ = ["GOARCH", "GOOS", "OCI_ARCHITECTURES", "goarch", "host_arch", "host_os", "host_platform"]
