"""The one executable-header reader (lemonpack/exe_header.py): real ELF files written by
Debian's compilers for x86-64 and arm64 (executables, a shared object, a relocatable object),
scripts and data; PE and Mach-O headers written byte for byte from their specifications (no
compiler for them here)."""

from __future__ import annotations

import struct
import subprocess

import pytest

from lemonpack.exe_header import (Executable, executables, foreign_executables, goarch, mismatch_message,
                                  parse_header, read_executable)
from support.cross import compile_c


def test_elf_executables_of_both_cpus(tmp_path):
    x86 = read_executable(compile_c(tmp_path / "x86", "amd64"))
    arm = read_executable(compile_c(tmp_path / "arm", "arm64"))
    assert x86 == Executable("ELF 64-bit", frozenset({"amd64"}), 62)
    assert arm == Executable("ELF 64-bit", frozenset({"arm64"}), 183)
    assert x86.describe() == "an ELF 64-bit file for x86-64"
    assert arm.runs_on("arm64") and not arm.runs_on("amd64")


def test_shared_object_counts_relocatable_does_not(tmp_path):
    so = read_executable(compile_c(tmp_path / "libx.so", "arm64", "int f(void){return 1;}", shared=True))
    assert so is not None and so.archs == {"arm64"}
    (tmp_path / "o.c").write_text("int g(void){return 2;}")
    subprocess.run(["gcc", "-c", "-o", str(tmp_path / "o.o"), str(tmp_path / "o.c")], check=True)
    assert read_executable(tmp_path / "o.o") is None  # ET_REL: linked, never run


def test_scripts_data_and_truncated_headers_are_no_executables(tmp_path):
    for name, data in {"run.sh": b"#!/bin/sh\necho hi\n", "data.bin": b"\0" * 100, "short": b"\x7fELF",
                       "empty": b"", "mz": b"MZ" + b"\0" * 10}.items():
        (tmp_path / name).write_bytes(data)
        assert read_executable(tmp_path / name) is None, name


def _pe(machine: int, magic: int = 0x20B) -> bytes:
    head = bytearray(0x80)
    head[:2] = b"MZ"
    struct.pack_into("<I", head, 0x3C, 0x40)
    head[0x40:0x44] = b"PE\0\0"
    struct.pack_into("<H", head, 0x44, machine)
    struct.pack_into("<H", head, 0x58, magic)
    return bytes(head)


def test_pe_machines():
    assert parse_header(_pe(0x8664)) == Executable("PE32+", frozenset({"amd64"}), 0x8664)
    assert parse_header(_pe(0xAA64)).archs == {"arm64"}
    assert parse_header(_pe(0x14C, 0x10B)) == Executable("PE32", frozenset({"386"}), 0x14C)
    far = bytearray(_pe(0x8664)[:0x40])
    struct.pack_into("<I", far, 0x3C, 0x200)  # the PE header beyond the first bytes: read_at reads it
    tail = bytearray(0x220)
    tail[0x200:0x204] = b"PE\0\0"
    struct.pack_into("<H", tail, 0x204, 0xAA64)
    assert parse_header(bytes(far), lambda off, n: bytes(tail[off:off + n])).archs == {"arm64"}


def test_macho_thin_universal_and_java_class():
    thin = struct.pack("<IiII", 0xFEEDFACF, 0x0100000C, 0, 2) + b"\0" * 48  # MH_MAGIC_64 LE, arm64, MH_EXECUTE
    assert parse_header(thin) == Executable("Mach-O 64-bit", frozenset({"arm64"}), 0x0100000C)
    obj = struct.pack("<IiII", 0xFEEDFACF, 0x01000007, 3, 1) + b"\0" * 48  # MH_OBJECT: not run
    assert parse_header(obj) is None
    fat = struct.pack(">II", 0xCAFEBABE, 2) + struct.pack(">IIIII", 0x01000007, 3, 0, 0, 0) \
        + struct.pack(">IIIII", 0x0100000C, 0, 0, 0, 0) + b"\0" * 16
    universal = parse_header(fat)
    assert universal.archs == {"amd64", "arm64"} and universal.runs_on("arm64") and universal.runs_on("amd64")
    java = struct.pack(">IHH", 0xCAFEBABE, 0, 52) + b"\0" * 60  # a class file: major version 52
    assert parse_header(java) is None


def test_tree_scan_names_the_foreign_files(tmp_path):
    tree = tmp_path / "tree"
    (tree / "bin").mkdir(parents=True)
    (tree / "lib").mkdir()
    compile_c(tree / "bin" / "engine", "amd64")
    compile_c(tree / "lib" / "libok.so", "arm64", "int f(void){return 1;}", shared=True)
    (tree / "bin" / "wrapper").write_text("#!/bin/sh\nexec engine\n")
    (tree / "bin" / "link").symlink_to("engine")  # read once, where it is
    assert [rel for rel, _ in executables(tree)] == ["bin/engine", "lib/libok.so"]
    foreign = foreign_executables(tree, "arm64")
    assert [rel for rel, _ in foreign] == ["bin/engine"]
    msg = mismatch_message("r.json: source: artifact A", foreign, "arm64")
    assert msg == ("r.json: source: artifact A: bin/engine is an ELF 64-bit file for x86-64, but the target CPU is "
                   "arm64 (AArch64 (arm64)): it would fail with 'exec format error' there")
    assert foreign_executables(tree, "amd64")[0][0] == "lib/libok.so"


@pytest.mark.parametrize("machine, arch", [("x86_64", "amd64"), ("aarch64", "arm64"), ("arm64", "arm64"),
                                           ("sparc", "sparc")])
def test_goarch(machine, arch):
    assert goarch(machine) == arch


def test_record_round_trip():
    exe = Executable("ELF 64-bit", frozenset({"arm64"}), 183)
    assert Executable.from_json(exe.to_json()) == exe
    with pytest.raises(ValueError):
        Executable.from_json(["ELF", ["vax"], 1])
