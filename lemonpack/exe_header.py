"""The one executable-header reader: which CPU a file's machine code is for, in OCI names.

Every room that takes an artifact into an image layer, a Nix package or an install (the
builder's :mod:`lemonpack.builder.artifact`, ``lemonpack unpack`` run by the Nix packages, the
release images, ``install oci://``) asks :func:`foreign_executables` whether the tree holds
machine code for another CPU than its target's, so an image labelled ``linux/arm64`` never
holds an x86-64 engine ("exec format error" on the node). The OCI architecture names (Go's
``GOARCH``, image-spec ``config.md``) and the kernel's spellings of them
(``platform.machine()``) live here too, so that the contract's host facts and
:mod:`lemonpack.oci.platform` share one table.

Formats read (the first bytes of a file only, never a memory map):

- **ELF** (System V gABI, "ELF Header"): ``\\x7fELF``, ``EI_CLASS`` (32/64-bit),
  ``EI_DATA`` (byte order), ``e_type`` (only ``ET_EXEC`` and ``ET_DYN``: executables and
  shared objects; relocatable ``.o`` files and core dumps are not run), ``e_machine``
  (``EM_X86_64`` 62, ``EM_AARCH64`` 183, ``EM_386`` 3, ``EM_ARM`` 40, ``EM_PPC64`` 21 with
  little-endian data, ``EM_S390`` 22 with 64-bit class, ``EM_RISCV`` 243 64-bit,
  ``EM_MIPS`` 8 64-bit little-endian, ``EM_LOONGARCH`` 258);
- **PE/COFF** (Microsoft "PE Format": the ``MZ`` stub, ``e_lfanew`` at 0x3c, ``PE\\0\\0``,
  then ``Machine``: ``IMAGE_FILE_MACHINE_AMD64`` 0x8664, ``ARM64`` 0xaa64, ``I386`` 0x14c,
  ``ARMNT`` 0x1c4);
- **Mach-O** (``<mach-o/loader.h>``: ``MH_MAGIC``/``MH_MAGIC_64`` either byte order,
  ``cputype`` ``CPU_TYPE_X86_64`` 0x01000007, ``CPU_TYPE_ARM64`` 0x0100000c, ``X86`` 7,
  ``ARM`` 12; ``filetype`` ``MH_EXECUTE``, ``MH_DYLIB``, ``MH_BUNDLE``) and universal files
  (``<mach-o/fat.h>``: ``FAT_MAGIC`` big-endian, one ``fat_arch`` per CPU; a file is for
  every CPU it holds; Java class files share the magic and are told apart by their count, a
  class file's major version being 45 or more).

A script (``#!``) is for no CPU: it runs wherever its interpreter does. A file of none of
these kinds (data, a truncated header, a relocatable object) is not an executable here.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: OCI ``architecture`` values lemonpack accepts (Go's GOARCH names, image-spec config.md).
OCI_ARCHITECTURES = ("amd64", "arm64", "arm", "386", "ppc64le", "s390x", "riscv64", "mips64le", "loong64")

#: ``platform.machine()`` spellings -> GOARCH (an OCI name maps to itself).
GOARCH = {"x86_64": "amd64", "amd64": "amd64", "AMD64": "amd64", "aarch64": "arm64", "arm64": "arm64",
          "i386": "386", "i686": "386", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x",
          "riscv64": "riscv64", "loongarch64": "loong64", "mips64": "mips64le"}

#: How a message names an OCI architecture's machine code.
MACHINE_NAMES = {"amd64": "x86-64", "arm64": "AArch64 (arm64)", "arm": "32-bit ARM", "386": "x86 (i386)",
                 "ppc64le": "PowerPC 64 LE", "s390x": "IBM S/390x", "riscv64": "RISC-V 64",
                 "mips64le": "MIPS64 LE", "loong64": "LoongArch64"}

# ELF e_machine -> (OCI architecture, the EI_CLASS it needs or None, the EI_DATA it needs or None)
_ELF = {62: ("amd64", 2, None), 183: ("arm64", 2, None), 3: ("386", 1, None), 40: ("arm", 1, None),
        21: ("ppc64le", 2, 1), 22: ("s390x", 2, None), 243: ("riscv64", 2, None), 8: ("mips64le", 2, 1),
        258: ("loong64", 2, None)}
_PE = {0x8664: "amd64", 0xAA64: "arm64", 0x14C: "386", 0x1C4: "arm"}
_MACHO = {0x01000007: "amd64", 0x0100000C: "arm64", 7: "386", 12: "arm"}
_MACHO_FILETYPES = {2, 6, 8}  # MH_EXECUTE, MH_DYLIB, MH_BUNDLE
_HEAD = 64


@dataclass(frozen=True)
class Executable:
    """What a file's header says: ``kind`` (``ELF 64-bit``, ``PE32+``, ``Mach-O 64-bit``,
    ``Mach-O universal`` ...), ``archs`` (the OCI architectures it runs on: one, several for a
    universal file; empty when its machine is one lemonpack has no name for) and ``machine``
    (the header's own number, for a message about an unknown one)."""

    kind: str
    archs: frozenset[str]
    machine: int

    def describe(self) -> str:
        """``"an ELF 64-bit executable for x86-64"``, as an error message names a file."""
        if not self.archs:
            return f"a {self.kind} file for machine {self.machine:#x}"
        names = " and ".join(MACHINE_NAMES.get(a, a) for a in sorted(self.archs))
        return f"{'an' if self.kind[0] in 'AEIOU' else 'a'} {self.kind} file for {names}"

    def runs_on(self, arch: str) -> bool:
        """Whether this file's machine code is for the OCI architecture ``arch``."""
        return arch in self.archs

    def to_json(self) -> list:
        """``[kind, [archs...], machine]``: how a cache record keeps it (:meth:`from_json`)."""
        return [self.kind, sorted(self.archs), self.machine]

    @classmethod
    def from_json(cls, data) -> "Executable":
        """The inverse of :meth:`to_json`; raises ``ValueError`` on another shape."""
        if not (isinstance(data, list) and len(data) == 3 and isinstance(data[0], str)
                and isinstance(data[1], list) and all(a in OCI_ARCHITECTURES for a in data[1])
                and type(data[2]) is int):
            raise ValueError(f"not an executable's record: {data!r}")
        return cls(data[0], frozenset(data[1]), data[2])


def goarch(machine: str) -> str:
    """The OCI ``architecture`` of a ``platform.machine()`` value (``x86_64`` -> ``amd64``);
    an unknown value is returned as it is."""
    return GOARCH.get(machine, machine)


def parse_header(head: bytes, read_at=None) -> Executable | None:
    """The :class:`Executable` of a file whose first bytes are ``head`` (at least 64 for an
    ELF or Mach-O header), or None (a script, data, a truncated or relocatable file).
    ``read_at(offset, size) -> bytes`` reads further (a PE header lies at ``e_lfanew``);
    without it a PE file's header must be inside ``head``. Raises nothing."""
    if head[:4] == b"\x7fELF":
        return _elf(head)
    if head[:2] == b"MZ":
        return _pe(head, read_at)
    if len(head) >= 28:
        return _macho(head, read_at)
    return None


def _elf(head: bytes) -> Executable | None:
    if len(head) < 20 or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    cls, data = head[4], head[5]
    e_type, e_machine = struct.unpack("<HH" if data == 1 else ">HH", head[16:20])
    if e_type not in (2, 3):  # ET_EXEC, ET_DYN
        return None
    kind = f"ELF {32 if cls == 1 else 64}-bit"
    known = _ELF.get(e_machine)
    if known is None or (known[1] is not None and known[1] != cls) or (known[2] is not None and known[2] != data):
        return Executable(kind, frozenset(), e_machine)
    return Executable(kind, frozenset({known[0]}), e_machine)


def _pe(head: bytes, read_at) -> Executable | None:
    if len(head) < 0x40:
        return None
    (lfanew,) = struct.unpack_from("<I", head, 0x3C)
    if lfanew > 1 << 20:
        return None
    hdr = head[lfanew:lfanew + 26] if lfanew + 26 <= len(head) else (read_at(lfanew, 26) if read_at else b"")
    if len(hdr) < 26 or hdr[:4] != b"PE\0\0":
        return None
    (machine,) = struct.unpack_from("<H", hdr, 4)
    (magic,) = struct.unpack_from("<H", hdr, 24)
    kind = "PE32+" if magic == 0x20B else "PE32"
    arch = _PE.get(machine)
    return Executable(kind, frozenset({arch}) if arch else frozenset(), machine)


def _macho(head: bytes, read_at) -> Executable | None:
    magic = head[:4]
    if magic in (b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe"):
        order = ">" if magic[0] == 0xFE else "<"
        cputype, _sub, filetype = struct.unpack_from(order + "iII", head, 4)
        if filetype not in _MACHO_FILETYPES:
            return None
        kind = "Mach-O 64-bit" if magic in (b"\xfe\xed\xfa\xcf", b"\xcf\xfa\xed\xfe") else "Mach-O"
        arch = _MACHO.get(cputype & 0xFFFFFFFF)
        return Executable(kind, frozenset({arch}) if arch else frozenset(), cputype & 0xFFFFFFFF)
    if magic == b"\xca\xfe\xba\xbe":
        (count,) = struct.unpack_from(">I", head, 4)
        if not 0 < count < 45:  # a Java class file: its major version (>= 45) is where the count would be
            return None
        table = head[8:8 + 20 * count] if 8 + 20 * count <= len(head) else (
            read_at(8, 20 * count) if read_at else b"")
        if len(table) < 20 * count:
            return None
        types = [struct.unpack_from(">I", table, 20 * i)[0] for i in range(count)]
        archs = frozenset(_MACHO[t] for t in types if t in _MACHO)
        return Executable("Mach-O universal", archs, types[0])
    return None


def read_executable(path: str | os.PathLike[str]) -> Executable | None:
    """The :class:`Executable` of the regular file ``path`` (its symlink not followed), or None
    (not an executable, a script, not a regular file). Raises ``OSError`` when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.pread(fd, _HEAD, 0)
        return parse_header(head, lambda off, n: os.pread(fd, n, off))
    finally:
        os.close(fd)


def executables(root: str | os.PathLike[str]) -> Iterator[tuple[str, Executable]]:
    """Every executable under the directory ``root`` (``(relative path, Executable)``, in sorted
    order; symlinks are not followed, so each file is read once, where it is). Raises
    ``OSError`` when a file cannot be read."""
    def walk(directory: Path, rel: str) -> Iterator[tuple[str, Executable]]:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            name = f"{rel}{e.name}"
            if e.is_dir(follow_symlinks=False):
                yield from walk(Path(e.path), name + "/")
            elif e.is_file(follow_symlinks=False):
                exe = read_executable(e.path)
                if exe is not None:
                    yield name, exe

    yield from walk(Path(root), "")


def foreign_executables(root: str | os.PathLike[str], arch: str) -> list[tuple[str, Executable]]:
    """The executables under ``root`` whose machine code is not for the OCI architecture
    ``arch`` (an empty list: every executable runs there, or there is none), in sorted order.
    Raises ``OSError`` when a file cannot be read."""
    return [(rel, exe) for rel, exe in executables(root) if not exe.runs_on(arch)]


def mismatch_message(where: str, foreign: list[tuple[str, Executable]], arch: str, limit: int = 3) -> str:
    """One line naming the first ``limit`` of ``foreign`` (from :func:`foreign_executables`),
    what each is and the target, prefixed with ``where`` (the artifact and field)."""
    shown = "; ".join(f"{rel} is {exe.describe()}" for rel, exe in foreign[:limit])
    more = f" (and {len(foreign) - limit} more)" if len(foreign) > limit else ""
    return (f"{where}: {shown}{more}, but the target CPU is {arch} ({MACHINE_NAMES.get(arch, arch)}): "
            f"it would fail with 'exec format error' there")


__all__ = ["Executable", "GOARCH", "MACHINE_NAMES", "OCI_ARCHITECTURES", "executables", "foreign_executables",
           "goarch", "mismatch_message", "parse_header", "read_executable"]
