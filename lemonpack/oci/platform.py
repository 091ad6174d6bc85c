"""OCI platform names of the machine lemonpack runs on (image-spec config.md, image-index.md).

An image config's ``architecture`` and ``os`` and an index entry's ``platform`` use Go's
``GOARCH``/``GOOS`` names (``amd64``, ``arm64``, ``linux``); Python reports the kernel's
(``platform.machine()``: ``x86_64``, ``aarch64``; ``sys.platform``: ``linux``, ``darwin``).
This module is the one mapping between the two: every room that needs "this machine's
architecture" as an OCI name (the builder's default ``--cpu-arch``, release images, base
image selection) asks :func:`host_platform`.
"""

from __future__ import annotations

import platform
import sys

#: OCI ``architecture`` values lemonpack accepts (Go's GOARCH names, image-spec config.md).
OCI_ARCHITECTURES = ("amd64", "arm64", "arm", "386", "ppc64le", "s390x", "riscv64", "mips64le", "loong64")

#: ``platform.machine()`` spellings -> GOARCH (an OCI name maps to itself).
GOARCH = {"x86_64": "amd64", "amd64": "amd64", "AMD64": "amd64", "aarch64": "arm64", "arm64": "arm64",
          "i386": "386", "i686": "386", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x",
          "riscv64": "riscv64", "loongarch64": "loong64", "mips64": "mips64le"}

#: ``sys.platform`` -> GOOS.
GOOS = {"linux": "linux", "darwin": "darwin", "win32": "windows", "cygwin": "windows"}


def goarch(machine: str) -> str:
    """The OCI ``architecture`` of a ``platform.machine()`` value (``x86_64`` -> ``amd64``);
    an unknown value is returned as it is."""
    return GOARCH.get(machine, machine)


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
