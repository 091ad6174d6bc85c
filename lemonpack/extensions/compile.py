"""Compile a generated registry into a program and a static library (seed 002 section 5,
"Compiled in, not loaded"; section 8, steps 5 and 6).

lemonpack ships the C++ a generated registry needs, as package data under
``lemonpack/extensions/cxx/`` (:data:`CXX_DIR`; ``include/`` at the repository top points
there):

- ``include/gufo/ext/registry.hpp``, ``provider.hpp``, ``artifact.hpp``: the public
  extension API (the registry the generated code calls, providers with capability, keys,
  availability and a probe as code, the artifact identity a probe reads);
- ``gufo-registry/main.cpp``: the ``gufo-registry`` program. It calls
  ``gufo_ext_register_all`` (every entry point, in registry order) and prints what
  registered; ``--json`` prints a JSON array, one object per provider in registry order,
  ``{"extension", "provider", "capability", "keys", "available", "reason"}``;
  ``--pick CAPABILITY --architecture ARCH [--meta K=V]... [--tensor NAME=TYPE]...`` asks
  the compiled probes in order and prints ``<extension> <provider>`` of the first yes, or
  ``No <capability> provider found for model architecture '<ARCH>'`` (exit 1).

The API, one call::

    from lemonpack.extensions.compile import compile_gufo
    built = compile_gufo(selection, "out")          # a pipeline.Selection
    built = compile_gufo("gen", "out", extension_dirs=[...])   # a 'generate --out gen' dir
    built.bin      # out/bin/gufo-registry
    built.include  # out/include: gufo/ext/*.hpp and gufo_ext_constants.hpp
    built.lib      # out/lib/libgufo-ext.a: the registry + every selected extension's objects

What is compiled: the generated ``gufo_ext_registry.cpp``, then per selected extension (in
registry order) its C++ translation units (:func:`translation_units`: those of its ``files``
in manifest order, else the ``*.cpp``/``*.cc``/``*.cxx`` at its top); the library holds those objects in that order and ``gufo-registry`` links
``main.cpp`` against it. Besides ``bin/``, ``include/`` and ``lib/``, ``out/share/gufo/``
holds ``gufo_ext_registry.cpp`` and ``extensions.json``.

Cross-compiling (``cpu_arch``, :func:`toolchain`): the GNU cross toolchain of the target
(``aarch64-linux-gnu-g++`` for ``arm64`` on an x86-64 machine), with the same flags.

Deterministic: the same inputs and toolchain give the same bytes. Sources are compiled with
``-g0``, ``-ffile-prefix-map`` (the staging directory becomes ``gufo``, an extension directory
``extensions/<name>``) and ``-frandom-seed=<object name>``; objects are archived in a fixed
order with ``ar rcsD`` (zero timestamps, uids and modes). ``jobs`` compilers run at once.

Atomic: everything is built in a sibling staging directory, then put at ``out``
(:func:`lemonpack.files.replace_directory`: an existing ``out``, a previous build, is replaced
as a whole; one holding anything else is refused; on any error ``out`` is left as it was).

Errors are :class:`CompileError` (exit 1): no compiler, a source that does not compile
(naming it, with the compiler's first lines), a generated directory missing a file, an
extension directory whose manifest is invalid or that the generated registry does not name.
The Nix package runs the same steps through ``lemonpack extensions build``.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from lemonpack.errors import LemonpackError, one_line
from lemonpack.exe_header import goarch, read_executable
from lemonpack.files import os_error_reason, replace_directory

if TYPE_CHECKING:
    from lemonpack.extensions.manifest import Extension
    from lemonpack.extensions.pipeline import Selection

#: The shipped C++: ``include/gufo/ext/*.hpp`` and ``gufo-registry/main.cpp``.
CXX_DIR = Path(str(resources.files("lemonpack.extensions") / "cxx"))
API_INCLUDE = CXX_DIR / "include"
MAIN_SOURCE = CXX_DIR / "gufo-registry" / "main.cpp"
#: Suffixes of the ``files`` compiled as translation units (headers are only included).
CXX_SUFFIXES = (".cpp", ".cc", ".cxx")
#: Flags of every compile (then ``cxxflags``, then the include and mapping flags).
CXXFLAGS = ("-std=c++17", "-O2", "-g0", "-Wall", "-Wextra")
#: OCI architecture -> the GNU triple of its cross toolchain (Debian's ``g++-<triple>``).
CROSS_TRIPLES = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
#: What an output directory holds (an existing one with anything else is not replaced).
OUTPUT_ENTRIES = ("bin", "include", "lib", "share")
#: The generated files a generated directory must hold.
GENERATED = ("extensions.json", "gufo_ext_registry.cpp", "gufo_ext_constants.hpp")


class CompileError(LemonpackError):
    """The registry could not be compiled: no compiler, a source that does not compile, an
    incomplete generated directory or a mismatched extension directory. Exit 1."""

    kind = "compile"


@dataclass(frozen=True)
class CompiledGufo:
    """What :func:`compile_gufo` built, under ``root``: ``bin`` (``bin/gufo-registry``),
    ``include`` (the API headers and the constants header), ``lib``
    (``lib/libgufo-ext.a``) and ``extensions``: the compiled extensions' names in registry
    order."""

    root: Path
    bin: Path
    include: Path
    lib: Path
    extensions: tuple[str, ...]

    def to_json(self) -> dict:
        """``{"root", "bin", "include", "lib", "extensions"}`` (paths as strings)."""
        return {"root": str(self.root), "bin": str(self.bin), "include": str(self.include), "lib": str(self.lib),
                "extensions": list(self.extensions)}


@dataclass(frozen=True)
class _Unit:
    source: Path   # absolute
    object: str    # file name in obj/ and member name in the archive
    maps: tuple[tuple[str, str], ...]  # -ffile-prefix-map pairs


def api_headers() -> list[Path]:
    """The public API headers lemonpack ships (``gufo/ext/*.hpp``), sorted."""
    return sorted((API_INCLUDE / "gufo" / "ext").glob("*.hpp"))


def translation_units(ext: "Extension") -> list[str]:
    """What is compiled of ``ext``, relative to its directory: the ``files`` that are C++
    translation units (:data:`CXX_SUFFIXES`), in manifest order; when ``files`` lists none
    (``files`` is optional, as in the seed's simplified manifest), every regular file with
    one of those suffixes at the top of the directory (``extension.cpp``, ``provider.cpp``
    ...), sorted by name. Every one is compiled with the host C++ compiler whatever target
    it belongs to: GPU kernels need the extension's own CMake build."""
    listed = [f for f in ext.files if f.endswith(CXX_SUFFIXES)]
    if listed:
        return listed
    return sorted(e.name for e in os.scandir(ext.path)
                  if e.name.endswith(CXX_SUFFIXES) and e.is_file(follow_symlinks=False))


def _object_name(ext: str, rel: str) -> str:
    return f"{ext}__{rel.replace('/', '__').rsplit('.', 1)[0]}.o"


def _from_generated_dir(generated: Path, extension_dirs: Iterable[Path]) -> tuple[dict[str, bytes], list["Extension"]]:
    from lemonpack.errors import ManifestError
    from lemonpack.extensions.manifest import load_manifest

    files = {}
    for name in GENERATED:
        try:
            files[name] = (generated / name).read_bytes()
        except OSError as e:
            raise CompileError(one_line(f"{generated / name}: cannot read the generated file "
                                        f"({e.strerror or e}); run 'lemonpack extensions generate --out "
                                        f"{generated}' first")) from None
    try:
        names = [e["name"] for e in json.loads(files["extensions.json"])["extensions"]]
    except (ValueError, KeyError, TypeError) as e:
        raise CompileError(f"{generated / 'extensions.json'}: not a generated extensions.json ({e})") from None
    by_name: dict[str, "Extension"] = {}
    for d in extension_dirs:
        try:
            ext = load_manifest(d)
        except ManifestError as e:
            raise CompileError(str(e)) from None
        if ext.name not in names:
            raise CompileError(f"{ext.manifest}: extension {ext.name!r} is not in {generated / 'extensions.json'} "
                               f"(selected: {', '.join(names) or 'none'})")
        by_name.setdefault(ext.name, ext)
    missing = [n for n in names if n not in by_name]
    if missing:
        raise CompileError(f"{generated / 'extensions.json'} selects {', '.join(missing)}, but no extension directory "
                           "given holds it (pass every selected extension's directory)")
    return files, [by_name[n] for n in names]


def toolchain(cpu_arch: str | None) -> tuple[str, str]:
    """``(cxx, ar)`` that write machine code for the OCI architecture ``cpu_arch``: this
    machine's (``$CXX`` or ``g++``, ``$AR`` or ``ar``) for its own architecture or None, else
    the GNU cross toolchain of :data:`CROSS_TRIPLES` (``aarch64-linux-gnu-g++`` and
    ``aarch64-linux-gnu-ar`` for ``arm64``: Debian's ``g++-aarch64-linux-gnu``). Raises
    :class:`CompileError` for an architecture with no cross toolchain named here, or one not
    installed (naming the Debian package)."""
    if cpu_arch is None or cpu_arch == goarch(platform.machine()):
        return os.environ.get("CXX") or "g++", os.environ.get("AR") or "ar"
    triple = CROSS_TRIPLES.get(cpu_arch)
    if triple is None:
        raise CompileError(f"no cross compiler for {cpu_arch} is known (this {goarch(platform.machine())} machine "
                           f"cross-compiles for: {', '.join(sorted(CROSS_TRIPLES))})")
    cxx, ar = f"{triple}-g++", f"{triple}-ar"
    if shutil.which(cxx) is None:
        raise CompileError(f"{cxx!r} not found on PATH: compiling gufo for {cpu_arch} on this "
                           f"{goarch(platform.machine())} machine needs the cross compiler (Debian: apt-get install "
                           f"g++-{triple})")
    return cxx, ar


def compile_gufo(source: "Selection | str | os.PathLike[str]", out_dir: str | os.PathLike[str], *,
                 extension_dirs: Iterable[str | os.PathLike[str]] = (), cxx: str | None = None,
                 ar: str | None = None, jobs: int = 2, cxxflags: Sequence[str] = (),
                 cpu_arch: str | None = None) -> CompiledGufo:
    """Compile the registry of ``source`` into ``out_dir`` (module docstring).

    ``source``: a :class:`~lemonpack.extensions.pipeline.Selection`, or the directory
    ``lemonpack extensions generate --out`` wrote (then ``extension_dirs`` must name the
    directory of every extension its ``extensions.json`` selects). ``cpu_arch``: the OCI
    architecture to compile for (None: this machine's); its :func:`toolchain` unless ``cxx``
    (the C++ compiler) and ``ar`` (the archiver) are given; the same flags and deterministic
    output rules whatever the architecture, and ``bin/gufo-registry`` must come out as
    machine code for it (:mod:`lemonpack.exe_header`). ``jobs``: compilers run at once (at
    least 1); ``cxxflags``: extra flags after :data:`CXXFLAGS`. Returns the
    :class:`CompiledGufo`. Raises :class:`CompileError`.
    """
    from lemonpack.extensions.generate import generate
    from lemonpack.extensions.pipeline import Selection

    if isinstance(source, Selection):
        files, exts = generate(source), list(source.extensions)
    else:
        files, exts = _from_generated_dir(Path(source), [Path(d) for d in extension_dirs])
    default_cxx, default_ar = toolchain(cpu_arch) if cxx is None or ar is None else (cxx, ar)
    cxx = cxx or default_cxx
    ar = ar or default_ar
    for tool in (cxx, ar):
        if shutil.which(tool) is None:
            raise CompileError(f"{tool!r} not found on PATH: compiling the registry needs a C++17 compiler and ar "
                               "(set CXX / AR, or install g++ and binutils)")
    out = Path(os.path.abspath(out_dir))
    if os.path.lexists(out):
        if out.is_symlink() or not out.is_dir():
            raise CompileError(f"{out} exists and is not a directory")
        other = sorted(n for n in os.listdir(out) if n not in OUTPUT_ENTRIES)
        if other:
            raise CompileError(f"{out} holds {other[0]!r}, which a build did not write; give a new directory "
                               "(the output directory is replaced as a whole)")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CompileError(one_line(f"cannot build into {out_dir}: {os_error_reason(e, out_dir)}")) from None
    stage = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.build-"))
    try:
        _build(stage, files, exts, cxx, ar, max(1, int(jobs)), tuple(cxxflags))
        if cpu_arch is not None:
            exe = read_executable(stage / "bin" / "gufo-registry")
            if exe is None or not exe.runs_on(cpu_arch):
                raise CompileError(f"{cxx} wrote {exe.describe() if exe else 'no executable'} for "
                                   f"bin/gufo-registry, not {cpu_arch} machine code")
        os.chmod(stage, 0o755)
        replace_directory(stage, out)
    except OSError as e:
        shutil.rmtree(stage, ignore_errors=True)
        raise CompileError(one_line(f"cannot build into {out}: {os_error_reason(e, out)}")) from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return CompiledGufo(out, out / "bin" / "gufo-registry", out / "include", out / "lib" / "libgufo-ext.a",
                        tuple(e.name for e in exts))


def stage_include(include: Path, constants: bytes) -> Path:
    """Write the include directory every compile uses (``-I include``): the public API
    headers as ``include/gufo/ext/*.hpp`` and ``constants`` as
    ``include/gufo_ext_constants.hpp``. The include check
    (:class:`lemonpack.extensions.includes.IncludeCheck`) preprocesses against the same
    layout. Returns ``include``."""
    (include / "gufo" / "ext").mkdir(parents=True, exist_ok=True)
    for h in api_headers():
        shutil.copyfile(h, include / "gufo" / "ext" / h.name)
    (include / "gufo_ext_constants.hpp").write_bytes(constants)
    return include


def _build(stage: Path, files: Mapping[str, bytes], exts: Sequence["Extension"], cxx: str, ar: str, jobs: int,
           cxxflags: tuple[str, ...]) -> None:
    include, share, obj = stage / "include", stage / "share" / "gufo", stage / "obj"
    for d in (share, obj, stage / "bin", stage / "lib"):
        d.mkdir(parents=True)
    stage_include(include, files["gufo_ext_constants.hpp"])
    (share / "gufo_ext_registry.cpp").write_bytes(files["gufo_ext_registry.cpp"])
    (share / "extensions.json").write_bytes(files["extensions.json"])
    shutil.copyfile(MAIN_SOURCE, share / "gufo-registry.cpp")
    stage_map = ((str(stage), "gufo"),)
    units = [_Unit(share / "gufo_ext_registry.cpp", "gufo_ext_registry.o", stage_map)]
    for ext in exts:
        maps = stage_map + ((str(ext.path), f"extensions/{ext.name}"),
                            (os.path.realpath(ext.path), f"extensions/{ext.name}"))
        units += [_Unit(ext.path / rel, _object_name(ext.name, rel), maps) for rel in translation_units(ext)]
    main = _Unit(share / "gufo-registry.cpp", "gufo-registry.o", stage_map)

    def compile_one(u: _Unit) -> subprocess.CompletedProcess:
        argv = [cxx, *CXXFLAGS, *cxxflags, "-I", str(include), f"-frandom-seed={u.object}",
                *(f"-ffile-prefix-map={a}={b}" for a, b in u.maps), "-c", str(u.source), "-o", str(obj / u.object)]
        return subprocess.run(argv, capture_output=True, text=True, errors="replace", env=_env(), cwd=stage)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(compile_one, units + [main]))
    for u, r in zip(units + [main], results):
        if r.returncode != 0:
            first = "; ".join(l for l in r.stderr.replace(str(stage), "gufo").splitlines() if "error" in l)[:600]
            raise CompileError(one_line(f"{u.source}: does not compile ({cxx} exit {r.returncode}): "
                                        f"{first or r.stderr.strip()[:600]}"))
    lib = stage / "lib" / "libgufo-ext.a"
    _run([ar, "rcsD", str(lib), *(str(obj / u.object) for u in units)], stage, "archiving lib/libgufo-ext.a")
    _run([cxx, *cxxflags, "-o", str(stage / "bin" / "gufo-registry"), str(obj / main.object), str(lib)], stage,
         "linking bin/gufo-registry")
    shutil.rmtree(obj)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    return env


def _run(argv: list[str], cwd: Path, what: str) -> None:
    r = subprocess.run(argv, capture_output=True, text=True, errors="replace", env=_env(), cwd=cwd)
    if r.returncode != 0:
        raise CompileError(one_line(f"{what} failed ({argv[0]} exit {r.returncode}): {r.stderr.strip()[:600]}"))


__all__ = ["API_INCLUDE", "CROSS_TRIPLES", "CXX_DIR", "CXXFLAGS", "CompileError", "CompiledGufo", "MAIN_SOURCE", "api_headers",
           "compile_gufo", "stage_include", "toolchain", "translation_units"]
