"""What a community extension's sources may reach, decided by the compiler (seed 002 section
5, "What an extension can touch", and section 8 step 5: external extensions are "checked
against the include and link allowlist"), and the entry symbols its sources must define.

**The include allowlist.** A community extension may include only the public headers
``gufo/ext/...`` (and the generated ``gufo_ext_constants.hpp``), the standard C++ and C library
headers (:data:`STANDARD_HEADERS`, found in the compiler's own system directories) and its own
files. The real preprocessor decides what that means (:class:`IncludeCheck`,
:mod:`lemonpack.extensions.preprocess`): each translation unit the build compiles
(:func:`lemonpack.extensions.compile.translation_units`) is preprocessed with the build's flags
and only the staged public include directory on the path (``-I``; quoted includes also search
the including file's directory, as in the build), and every include directive it *executes*
is judged, in every file it reads, whatever that file's suffix (an ``impl.txt``): a computed
``#include H``, a comment inside the directive, a line continuation, a guarded re-include are
all seen as the compiler sees them; ``#include_next`` and ``#import`` (GCC extensions) are
refused; so are ``#line`` directives and line markers in the extension's files (they rewrite
the file names and lines the check reads), and any file the compiler opened (``-MD``) from
outside the extension, the public headers and the compiler's system directories. Each reason
names ``file:line`` of the directive, and the includes that led to the file holding it.

Before that, the extension directory is walked without the compiler (:func:`tree_problems`,
also for extensions the selection leaves out): a symlink must stay inside the directory,
judged by its text alone (:func:`lemonpack.safetree.symlink_problem`, the rule ``lemonpack
release`` and the archive extractor apply), so the CLI on the user's directory and Nix on its
store copy (where a symlink out of the tree dangles) give the same reason; and a fifo, socket
or device is a reason (the compiler would block on it; the Nix store cannot hold one).

**Entry symbols** (:func:`entry_problems`, for every extension): the manifest's ``entry`` and
each provider's ``entry`` are called by the generated registry; one that no source defines is
a link error. Each must be defined (:func:`lemonpack.extensions.cxxscan.defined_functions`) in
one of the translation units, read as text; if not, the preprocessed units are read too (a
definition a macro writes), when a compiler is there; then the reason names the manifest, the
field, the symbol and the files searched.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from lemonpack.errors import one_line
from lemonpack.extensions import cxxscan
from lemonpack.safetree import inside, safe_relative_path
from lemonpack.extensions import templates
from lemonpack.extensions.preprocess import (Directive, Marker, NoCompiler, Toolchain, missing_header, not_found,
                                             preprocess, read_output, toolchain)

if TYPE_CHECKING:
    from lemonpack.extensions.manifest import Extension


#: Standard C++ library headers (C++23) and the C library headers in both spellings.
STANDARD_HEADERS = frozenset("""
algorithm any array atomic barrier bit bitset charconv chrono codecvt compare complex concepts
condition_variable coroutine deque exception execution expected filesystem flat_map flat_set format
forward_list fstream functional future generator initializer_list iomanip ios iosfwd iostream istream
iterator latch limits list locale map mdspan memory memory_resource mutex new numbers numeric optional
ostream print queue random ranges ratio regex scoped_allocator semaphore set shared_mutex
source_location span spanstream sstream stack stacktrace stdexcept stdfloat stop_token streambuf string
string_view syncstream system_error thread tuple type_traits typeindex typeinfo unordered_map
unordered_set utility valarray variant vector version
cassert cctype cerrno cfenv cfloat cinttypes climits clocale cmath csetjmp csignal cstdarg cstddef
cstdint cstdio cstdlib cstring ctime cuchar cwchar cwctype
assert.h ctype.h errno.h fenv.h float.h inttypes.h limits.h locale.h math.h setjmp.h signal.h stdarg.h
stddef.h stdint.h stdio.h stdlib.h string.h time.h uchar.h wchar.h wctype.h
""".split())

#: Generated header every extension may include.
GENERATED_HEADERS = frozenset({"gufo_ext_constants.hpp"})

#: Largest file of an extension's own the check reads as text (bytes); a larger one the
#: compiler reads is a reason.
MAX_SOURCE_BYTES = 16 * 2**20

#: Reasons kept per extension (the rest are counted in one last reason).
MAX_REASONS = 50

#: Headers found nowhere that one unit's check goes past (each costs one more run).
MAX_ABSENT = 20

_ALLOWED = ("community extensions may include only gufo/ext/... public headers, standard headers "
            "and their own files")


# ---------------------------------------------------------------- the walk (no compiler)

def tree_problems(directory: Path) -> list[str]:
    """Reasons the extension ``directory`` cannot be judged safely, found without reading a
    file: each symlink that is absolute or leaves ``directory``
    (:func:`lemonpack.safetree.symlink_problem`, from the link's text: the same on the user's
    tree and on a copy where the link dangles), each fifo, socket or device. Symlinked
    directories are judged, not walked; a symlink that stays inside points at entries the walk
    reaches at their real place. Sorted walk; each reason names the entry."""
    from lemonpack.safetree import symlink_problem

    out: list[str] = []
    top = os.fspath(directory)
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        dirpath = os.path.join(top, rel_dir) if rel_dir else top
        try:
            entries = sorted(os.scandir(dirpath), key=lambda e: e.name)
        except OSError as e:
            out.append(one_line(f"{dirpath}: cannot list the extension directory ({e.strerror or e})"))
            continue
        subdirs = []
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.is_symlink():
                why = symlink_problem(top, rel)
                if why:
                    out.append(symlink_reason(entry.path, why))
            elif entry.is_dir(follow_symlinks=False):
                subdirs.append(rel)
            elif not entry.is_file(follow_symlinks=False):
                out.append(one_line(f"{entry.path}: not a regular file or directory (a fifo, socket or device): "
                                    "the compiler would block on it or read a device"))
        stack += reversed(subdirs)
    return out


def symlink_reason(path: str | os.PathLike[str], why: str) -> str:
    """The one wording of a refused symlink in an extension (the walk's, and the pipeline's
    for a symlinked ``extension.json``)."""
    return one_line(f"{os.fspath(path)}: {why}: a symlink in an extension must stay inside its directory "
                    "(its sources are compiled, so they must be scanned)")


# ---------------------------------------------------------------- the compiler's view

class IncludeCheck:
    """The preprocessor runs of the include check and of the entry-symbol fallback, sharing
    one staged public include directory (the shipped ``gufo/ext/*.hpp`` and a
    ``gufo_ext_constants.hpp``; the generated one holds no directive but ``#pragma once``, so
    every selection's preprocesses alike) and one :class:`~lemonpack.extensions.preprocess.Toolchain`.

    Use as a context manager (the staged files are removed on exit)::

        with IncludeCheck() as check:
            reasons = check.include_problems(ext)

    ``cxx``: the compiler (default ``$CXX`` or ``g++``); ``flags``: the compile's (default
    :data:`lemonpack.extensions.compile.CXXFLAGS`). Nothing runs until a check is asked for;
    a missing compiler is then a reason of each checked extension (:meth:`include_problems`),
    never an exception."""

    def __init__(self, cxx: str | None = None, flags: Sequence[str] | None = None):
        from lemonpack.extensions.compile import CXXFLAGS

        self.cxx = cxx
        self.flags = tuple(CXXFLAGS if flags is None else flags)
        self._root: Path | None = None
        self._tc: Toolchain | None = None
        self._why: str | None = None

    def __enter__(self) -> "IncludeCheck":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Remove the staged files (idempotent)."""
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def _ready(self) -> tuple[Toolchain, Path] | str:
        """``(toolchain, staged include directory)``, or why the compiler cannot run."""
        from lemonpack.extensions.compile import stage_include

        if self._why is not None:
            return self._why
        if self._tc is None:
            try:
                self._tc = toolchain(self.cxx, self.flags)
            except NoCompiler as e:
                self._why = str(e)
                return self._why
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="lemonpack-include-check-"))
            constants = (templates.CONSTANTS_HEAD + templates.CONSTANTS_API.format(api_version="0.0.0")
                         + templates.CONSTANTS_TAIL).encode("ascii")
            stage_include(self._root / "include", constants)
        return self._tc, self._root / "include"

    def include_problems(self, ext: "Extension") -> list[str]:
        """Every reason ``ext``'s translation units break the include allowlist (module
        docstring), in unit order, at most :data:`MAX_REASONS` (then one saying how many
        more). A compiler that cannot run is one reason (the check cannot be done)."""
        from lemonpack.extensions.compile import translation_units

        ready = self._ready()
        if isinstance(ready, str):
            return [one_line(f"{ext.manifest}: cannot check the include allowlist: {ready}")]
        tc, include = ready
        assert self._root is not None
        work = Path(tempfile.mkdtemp(dir=self._root, prefix="unit-"))
        try:
            absent = work / "absent"  # empty stand-ins of the headers found nowhere, searched last
            absent.mkdir()
            judge = _Judge(ext.path, tc, include, absent)
            for i, rel in enumerate(translation_units(ext)):
                source = Path(os.path.abspath(ext.path / rel))
                for _ in range(MAX_ABSENT + 1):
                    run = preprocess(tc, source, include, work, f"u{i}", after=absent)
                    name = missing_header(run.stderr) if run.returncode != 0 else None
                    if name is None or not _stand_in(absent, name):
                        break
                judge.unit(ext.path / rel, run)
                run.output.unlink(missing_ok=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        out = judge.reasons
        if len(out) > MAX_REASONS:
            out = out[:MAX_REASONS] + [f"{ext.manifest}: and {len(out) - MAX_REASONS} more include problems"]
        return out

    def include_problems_of(self, exts: Sequence["Extension"], jobs: int = 2) -> list[list[str]]:
        """:meth:`include_problems` of each of ``exts`` (in that order), ``jobs`` extensions
        at once (at least 1)."""
        if not exts:
            return []
        if isinstance(self._ready(), str) or len(exts) == 1 or jobs <= 1:
            return [self.include_problems(e) for e in exts]
        with ThreadPoolExecutor(max_workers=max(1, int(jobs))) as pool:
            return list(pool.map(self.include_problems, exts))

    def preprocessed_definitions(self, ext: "Extension") -> set[str] | None:
        """The functions ``ext``'s translation units define after preprocessing (macros
        expanded), or None when the compiler cannot run."""
        from lemonpack.extensions.compile import translation_units

        ready = self._ready()
        if isinstance(ready, str):
            return None
        tc, include = ready
        assert self._root is not None
        work = Path(tempfile.mkdtemp(dir=self._root, prefix="defs-"))
        out: set[str] = set()
        try:
            for i, rel in enumerate(translation_units(ext)):
                run = preprocess(tc, Path(os.path.abspath(ext.path / rel)), include, work, f"u{i}")
                if run.returncode == 0 and run.output.stat().st_size <= 4 * MAX_SOURCE_BYTES:
                    out |= cxxscan.defined_functions(run.output.read_text(encoding="utf-8", errors="replace"))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return out


def _stand_in(absent: Path, name: str) -> bool:
    """Write an empty file where the compiler will find ``absent/name`` (a header it found
    nowhere), so the next run goes past it and the directive is judged like any other (True);
    False when ``name`` is absolute, would lead out of ``absent`` (``..`` is applied as the
    compiler's open does: a directory must exist before each ``..``) or is there already: the
    run's failure is then reported as it is."""
    if name.startswith("/") or "\0" in name:
        return False
    parts = name.split("/")
    cur = absent
    try:
        for part in parts[:-1]:
            if part in ("", "."):
                continue
            if part == "..":
                if cur == absent:
                    return False
                cur = cur.parent
            else:
                cur = cur / part
                cur.mkdir(exist_ok=True)
        if parts[-1] in ("", ".", "..") or os.path.lexists(cur / parts[-1]):
            return False
        (cur / parts[-1]).write_bytes(b"")
    except OSError:
        return False
    return True


class _Judge:
    """Judges the preprocessor runs of one extension's units (:meth:`IncludeCheck.include_problems`)."""

    def __init__(self, directory: Path, tc: Toolchain, include: Path, absent: Path):
        self.root = os.path.realpath(directory)
        self.include = os.path.realpath(include)
        self.absent = os.path.realpath(absent)
        self.system = tc.system_dirs
        self.cxx = tc.cxx
        self.reasons: list[str] = []
        self.scanned: set[str] = set()   # own files already read for line directives
        self._real: dict[str, str] = {}

    # -- where a file is
    def real(self, path: str) -> str:
        r = self._real.get(path)
        if r is None:
            r = self._real[path] = os.path.realpath(path)
        return r

    def own(self, real: str) -> bool:
        return inside(real, self.root)

    def public(self, real: str) -> bool:
        if real == self.include or not inside(real, self.include):
            return False
        rel = os.path.relpath(real, self.include)
        return rel in GENERATED_HEADERS or rel.startswith("gufo/ext/")

    def in_system(self, real: str) -> bool:
        return any(real != d and inside(real, d) for d in self.system)

    def stand_in(self, real: str) -> bool:
        return real != self.absent and inside(real, self.absent)

    # -- one unit
    def unit(self, source: Path, run) -> None:
        via: dict[str, tuple[str, int]] = {}     # own file (real) -> (including file, line)
        refused: set[str] = set()                # files a refused directive entered (real)
        current = ""                             # the file the last marker named, as written
        pending: tuple[Directive, str, int] | None = None

        def settle(entered: str | None) -> None:
            nonlocal pending
            if pending is None:
                return
            d, includer, line = pending
            pending = None
            target = self.real(entered) if entered is not None else None
            if target is not None and self.own(target):
                via.setdefault(target, (includer, line))
            why = self._refusal(d, includer, target)
            if why is None:
                return
            if target is not None:
                refused.add(target)
            chain = self._chain(self.real(includer), via)
            self.reasons.append(one_line(f"{includer}:{line}: {d.spelled()} {why}{chain}"))

        for line, item, blank in read_output(run.output):
            if isinstance(item, Marker):
                if 1 in item.flags and pending is not None:
                    settle(item.file)
                current = item.file
            elif isinstance(item, Directive):
                settle(None)
                if current and self.own(self.real(current)):
                    pending = (item, current, line)
            elif not blank:
                settle(None)
        settle(None)
        if run.returncode != 0:
            self.reasons.append(self._failure(source, run))
            return
        for dep in run.deps:
            real = self.real(dep)
            if self.own(real):
                self._scan_own(dep, real)
            elif not (self.public(real) or self.in_system(real) or self.stand_in(real)) and real not in refused:
                self.reasons.append(one_line(
                    f"{source}: the compiler read {dep}, which is neither a file of the extension, a public "
                    "header nor in one of the compiler's system directories: " + _ALLOWED))

    def _failure(self, source: Path, run) -> str:
        """The reason of a run that failed: a header found nowhere that could not be stood in
        for (its name leads out of every directory) is named as a refused directive; any other
        failure with the compiler's own error lines."""
        missing = not_found(run.stderr)
        if missing is not None:
            file, line, name = missing
            spelled = f"<{name}>"
            try:
                with open(file, "rb") as f:
                    text = f.read(MAX_SOURCE_BYTES).decode("utf-8", errors="replace").splitlines()
                if 0 < line <= len(text) and f'"{name}"' in text[line - 1]:
                    spelled = f'"{name}"'
            except OSError:
                pass
            return one_line(f"{file}:{line}: #include {spelled} is not allowed: {_ALLOWED} (and the compiler finds "
                            "no such file on the include path)")
        said = "; ".join(l.strip() for l in run.stderr.splitlines() if "error" in l) or run.stderr.strip()
        return one_line(f"{source}: the preprocessor failed ({os.path.basename(self.cxx)} exit {run.returncode}), so "
                        f"what it includes cannot be checked: {said[:300]}")

    def _refusal(self, d: Directive, includer: str, target: str | None) -> str | None:
        """Why directive ``d`` (in own file ``includer``, entering ``target`` or, when the
        preprocessor skipped the file as already included, None) is refused, or None."""
        if d.kind != "include":
            return (f"is not allowed: #{d.kind} is a GCC extension a community extension may not use "
                    "(write #include)")
        by_name = d.name in GENERATED_HEADERS or d.name in STANDARD_HEADERS or (
            d.name.startswith("gufo/ext/") and safe_relative_path(d.name))
        if target is not None:
            if self.stand_in(target):
                return ("names no file: the compiler finds it nowhere on the include path" if by_name else
                        f"is not allowed: {_ALLOWED} (and the compiler finds no such file on the include path)")
            if self.own(target) or self.public(target):
                return None
            if d.name in STANDARD_HEADERS and self.in_system(target):
                return None
            return f"is not allowed: {_ALLOWED} (it resolves to {target})"
        # skipped as already included: judged by the name, resolved as the compiler does
        if by_name:
            return None
        if d.delim == '"':
            candidate = self.real(os.path.join(os.path.dirname(includer), d.name))
            if self.own(candidate) and os.path.isfile(candidate):
                return None
        return f"is not allowed: {_ALLOWED}"

    def _chain(self, real: str, via: dict[str, tuple[str, int]]) -> str:
        hops: list[str] = []
        seen = {real}
        while real in via and len(hops) < 8:
            includer, line = via[real]
            hops.append(f"{includer}:{line}")
            real = self.real(includer)
            if real in seen:
                break
            seen.add(real)
        return f" (included from {', from '.join(hops)})" if hops else ""

    def _scan_own(self, shown: str, real: str) -> None:
        """Refuse ``#line`` and line markers in an own file the compiler read (once each)."""
        if real in self.scanned:
            return
        self.scanned.add(real)
        try:
            with open(real, "rb") as f:
                data = f.read(MAX_SOURCE_BYTES + 1)
        except OSError as e:
            self.reasons.append(one_line(f"{shown}: cannot read it ({e.strerror or e})"))
            return
        if len(data) > MAX_SOURCE_BYTES:
            self.reasons.append(one_line(f"{shown}: larger than {MAX_SOURCE_BYTES} bytes"))
            return
        if b"#" not in data and b"%:" not in data:
            return
        for line, name in cxxscan.directives(data.decode("utf-8", errors="replace")):
            if name == "line" or name[:1].isdigit():
                self.reasons.append(one_line(
                    f"{shown}:{line}: #{'line' if name == 'line' else ' ' + name} is not allowed in a community "
                    "extension: line directives and line markers change the file names and lines the compiler "
                    "reports, which the include check reads"))


# ---------------------------------------------------------------- entry symbols

def entry_symbols(ext: "Extension") -> list[tuple[str, str]]:
    """``[(JSON path, symbol)]`` of every entry point the registry may call: ``entry`` and
    each provider's ``providers[i].entry``, in manifest order."""
    return [("entry", ext.entry)] + [(f"providers[{i}].entry", p.entry) for i, p in enumerate(ext.providers)]


def entry_problems(ext: "Extension", check: IncludeCheck | None = None) -> list[str]:
    """Reasons ``ext`` cannot link: each entry symbol (:func:`entry_symbols`) that none of
    its translation units defines, read as text (comments and literals skipped) and, for
    those still missing when ``check`` can run the compiler, preprocessed. Each reason
    names the manifest, the field, the symbol and the files searched (rule
    ``undefined-entry``)."""
    from lemonpack.errors import Problem
    from lemonpack.extensions.compile import translation_units

    units = translation_units(ext)
    wanted = entry_symbols(ext)
    defined: set[str] = set()
    for rel in units:
        try:
            with open(ext.path / rel, "rb") as f:
                data = f.read(MAX_SOURCE_BYTES + 1)
        except OSError:
            continue
        if len(data) <= MAX_SOURCE_BYTES and any(s.encode() in data for _, s in wanted):
            defined |= cxxscan.defined_functions(data.decode("utf-8", errors="replace"))
    missing = [(where, s) for where, s in wanted if s not in defined]
    if missing and units and check is not None:
        more = check.preprocessed_definitions(ext)
        if more is not None:
            missing = [(where, s) for where, s in missing if s not in more]
    if not missing:
        return []
    searched = ", ".join(units) if units else "none: 'files' lists no .cpp/.cc/.cxx and there is none at the top"
    return [str(Problem(str(ext.manifest), where, "undefined-entry",
                        f"entry symbol {symbol!r} is defined in none of the extension's sources, so linking the "
                        f"registry would fail; searched: {searched} (and what they include)"))
            for where, symbol in missing]


__all__ = ["GENERATED_HEADERS", "IncludeCheck", "MAX_REASONS", "MAX_SOURCE_BYTES", "STANDARD_HEADERS",
           "entry_problems", "entry_symbols", "symlink_reason", "tree_problems"]
