"""Machine code for a CPU the tests name: tiny C programs compiled by Debian's compilers (``gcc``
for this machine, ``aarch64-linux-gnu-gcc`` from ``gcc-aarch64-linux-gnu`` for arm64), and
binfmt_misc set up so the kernel runs arm64 binaries through ``qemu-aarch64-static``
(``qemu-user-static``: the line of ``/usr/lib/binfmt.d/qemu-aarch64.conf``, flags ``OPF``).
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import pytest

from support.tools import APT, need

#: OCI architecture -> the C compiler that writes its machine code (on an x86-64 machine).
COMPILERS = {"amd64": "x86_64-linux-gnu-gcc", "arm64": "aarch64-linux-gnu-gcc"}
APT.update({"x86_64-linux-gnu-gcc": "gcc", "aarch64-linux-gnu-gcc": "gcc-aarch64-linux-gnu",
            "aarch64-linux-gnu-g++": "g++-aarch64-linux-gnu", "qemu-aarch64-static": "qemu-user-static"})

HELLO = r'''
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--version") == 0) { puts("engine " ARCH " 1.0"); return 0; }
    printf("hello from " ARCH "\n");
    return 0;
}
'''


def compile_c(out: Path, arch: str, source: str = HELLO, *, static: bool = True, shared: bool = False) -> Path:
    """Compile ``source`` (``ARCH`` defined as the OCI architecture string) into ``out`` for
    ``arch`` (``amd64`` or ``arm64``): statically linked by default, so it runs in any image;
    ``shared``: a shared object instead. Fails the test naming the package when the compiler is
    missing."""
    cc = COMPILERS[arch]
    if arch == "amd64" and platform.machine() == "x86_64" and not os.path.exists(f"/usr/bin/{cc}"):
        cc = "gcc"
    need(cc)
    src = out.with_suffix(".c")
    src.write_text(source)
    flags = ["-shared", "-fPIC"] if shared else (["-static"] if static else [])
    subprocess.run([cc, "-O1", "-s", *flags, f'-DARCH="{arch}"', "-o", str(out), str(src)], check=True)
    src.unlink()
    return out


BINFMT = Path("/proc/sys/fs/binfmt_misc")
QEMU_CONF = Path("/usr/lib/binfmt.d/qemu-aarch64.conf")


def binfmt_aarch64() -> None:
    """Make the kernel run arm64 ELF files through qemu (idempotent): mount binfmt_misc when it
    is not mounted and register ``qemu-aarch64`` from ``qemu-user-static``'s binfmt.d line.
    Skips the test, naming the reason, when it cannot (not root, no binfmt_misc in this kernel
    or container)."""
    need("qemu-aarch64-static")
    if (BINFMT / "qemu-aarch64").exists():
        return
    if os.geteuid() != 0:
        pytest.skip("running arm64 binaries needs binfmt_misc set up as root (not root here)")
    if not (BINFMT / "register").exists():
        r = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"binfmt_misc cannot be mounted here: {r.stderr.strip()}")
    line = QEMU_CONF.read_text().strip()
    try:
        (BINFMT / "register").write_text(line)
    except OSError as e:
        if not (BINFMT / "qemu-aarch64").exists():  # another test registered it in between
            pytest.skip(f"cannot register qemu-aarch64 with binfmt_misc: {e}")
