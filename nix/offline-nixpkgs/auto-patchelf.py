"""The stand-in autoPatchelf (nixpkgs' pkgs/build-support/setup-hooks/auto-patchelf.py,
written anew with the standard library and Debian's `patchelf`; same arguments, same
decisions, same messages).

For every regular file (not a symlink) under --paths that is an ELF file of the
interpreter's architecture and a compatible OS ABI: a static executable or a file with no
segments is skipped; a dynamic executable (one with PT_INTERP) gets --interpreter as its
interpreter and --runtime-dependencies in its RUNPATH; each NEEDED library that is not an
existing absolute path nor in --libc is looked up by soname and architecture among the
shared objects under --paths (first) and in the --libs directories (and the RUNPATHs of the
libraries found there); found ones go into the file's RUNPATH, in order. Then a summary;
a library found nowhere fails the run ("auto-patchelf could not satisfy dependency NAME
wanted by FILE") unless its name, or "*", is in --ignore-missing.
"""
import argparse
import struct
import subprocess
import sys
from pathlib import Path

PT_INTERP = 3
ET_EXEC = 2


def elf_header(path: Path):
    """(machine, osabi, e_type, phnum, has_interp) of an ELF file, or None if it is not one."""
    try:
        with path.open("rb") as f:
            head = f.read(64)
            if len(head) < 52 or head[:4] != b"\x7fELF":
                return None
            is64, endian = head[4] == 2, "<" if head[5] == 1 else ">"
            osabi = head[7]
            e_type, machine = struct.unpack(endian + "HH", head[16:20])
            if is64:
                phoff, = struct.unpack(endian + "Q", head[32:40])
                phentsize, phnum = struct.unpack(endian + "HH", head[54:58])
            else:
                phoff, = struct.unpack(endian + "I", head[28:32])
                phentsize, phnum = struct.unpack(endian + "HH", head[42:46])
            has_interp = False
            for i in range(phnum):
                f.seek(phoff + i * phentsize)
                p_type, = struct.unpack(endian + "I", f.read(4))
                has_interp = has_interp or p_type == PT_INTERP
            return machine, osabi, e_type, phnum, has_interp
    except (OSError, struct.error):
        return None


def patchelf(*args: str) -> str:
    return subprocess.run(["patchelf", *args], check=True, capture_output=True, text=True).stdout.strip()


def compatible(wanted: int, got: int) -> bool:
    """OS ABIs: SYSV (0) goes with any; otherwise they must be equal."""
    return wanted == 0 or got == 0 or wanted == got


def files(root: Path, pattern: str, recursive: bool):
    return sorted(root.rglob(pattern) if recursive else root.glob(pattern))


class Cache:
    """(soname, machine) -> [(directory, osabi)], filled from directories of shared objects."""

    def __init__(self):
        self.seen: set[Path] = set()
        self.by_name: dict[tuple[str, int], list[tuple[Path, int]]] = {}

    def add(self, dirs: list[Path], recursive: bool = False) -> None:
        todo = list(dirs)
        while todo:
            d = todo.pop(0)
            if d in self.seen:
                continue
            self.seen.add(d)
            for lib in files(d, "*.so*", recursive):
                if not lib.is_file():
                    continue
                h = elf_header(lib)
                if h is None:
                    continue
                try:
                    rpath = patchelf("--print-rpath", str(lib))
                except subprocess.CalledProcessError:
                    rpath = ""
                todo += [Path(p) for p in rpath.split(":") if p and "$ORIGIN" not in p]
                self.by_name.setdefault((lib.name, h[0]), []).append((lib.resolve().parent, h[1]))

    def find(self, name: str, machine: int, osabi: int):
        for d, abi in self.by_name.get((name, machine), []):
            if compatible(osabi, abi):
                return d
        return None


def main() -> int:
    ap = argparse.ArgumentParser(prog="auto-patchelf")
    ap.add_argument("--ignore-missing", nargs="*", default=[])
    ap.add_argument("--no-recurse", dest="recursive", action="store_false")
    ap.add_argument("--paths", nargs="*", type=Path, default=[])
    ap.add_argument("--libs", nargs="*", type=Path, default=[])
    ap.add_argument("--runtime-dependencies", nargs="*", type=Path, default=[])
    ap.add_argument("--append-rpaths", nargs="*", type=Path, default=[])
    ap.add_argument("--extra-args", nargs="*", default=[])
    ap.add_argument("--interpreter", type=Path, required=True)
    ap.add_argument("--libc", type=Path, required=True)
    args = ap.parse_args()
    print("automatically fixing dependencies for ELF files")
    if not args.paths:
        sys.exit("No paths to patch, stopping.")
    interp = elf_header(args.interpreter.resolve())
    assert interp is not None, f"{args.interpreter}: not an ELF file"
    cache = Cache()
    cache.add(args.paths, args.recursive)
    cache.add(args.libs)
    missing: list[tuple[str, Path]] = []
    for root in args.paths:
        for path in files(root, "*", args.recursive):
            if path.is_symlink() or not path.is_file():
                continue
            h = elf_header(path)
            if h is None:
                continue
            machine, osabi, e_type, phnum, has_interp = h
            if e_type == ET_EXEC and not has_interp:
                print(f"skipping {path} because it is statically linked")
                continue
            if phnum == 0:
                print(f"skipping {path} because it contains no segment")
                continue
            if machine != interp[0]:
                print(f"skipping {path} because its architecture ({machine}) differs from target ({interp[0]})")
                continue
            if not compatible(interp[1], osabi):
                print(f"skipping {path} because its OS ABI ({osabi}) is not compatible with target ({interp[1]})")
                continue
            rpath: list[Path] = []
            if has_interp:
                print("setting interpreter of", path)
                patchelf("--set-interpreter", str(args.interpreter), str(path))
                rpath += args.runtime_dependencies
            print("searching for dependencies of", path)
            for dep in patchelf("--print-needed", str(path)).split():
                dep_path = Path(dep)
                if dep_path.is_absolute() and dep_path.is_file():
                    continue
                if (args.libc / dep).is_file():
                    continue
                found = cache.find(dep_path.name, machine, osabi)
                if found is not None:
                    rpath.append(found)
                    print(f"    {dep} -> found: {found}")
                else:
                    missing.append((dep, path))
                    print(f"    {dep} -> not found!")
            rpath += args.append_rpaths
            joined = ":".join(dict.fromkeys(p.as_posix() for p in rpath))
            if rpath:
                print("setting RPATH to:", joined)
                patchelf("--set-rpath", joined, *args.extra_args, str(path))
    print(f"auto-patchelf: {len(missing)} dependencies could not be satisfied")
    failure = False
    for dep, path in missing:
        if dep in args.ignore_missing or "*" in args.ignore_missing:
            print(f"warn: auto-patchelf ignoring missing {dep} wanted by {path}")
        else:
            print(f"error: auto-patchelf could not satisfy dependency {dep} wanted by {path}")
            failure = True
    if failure:
        sys.exit("auto-patchelf failed to find all the required dependencies.\n"
                 "Add the missing dependencies to --libs or use `--ignore-missing=\"foo.so.1 bar.so etc.so\"`.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
