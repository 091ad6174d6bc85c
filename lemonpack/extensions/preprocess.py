"""Running the C++ preprocessor on an extension's translation units, and reading what it
reports (GCC's documented outputs; Clang writes the same ones).

One run per translation unit, with the flags of the real compile
(:data:`lemonpack.extensions.compile.CXXFLAGS`, ``-I`` the staged public include directory),
plus:

- ``-E -dI``: the preprocessed text, with every ``#include``/``#include_next``/``#import``
  directive the preprocessor *executed* written back as it read it (a computed
  ``#include H`` appears with ``H`` expanded; a directive in a skipped ``#if`` block does not
  appear at all; one whose file an include guard or ``#pragma once`` skips does), between
  *line markers* ``# LINE "FILE" FLAGS`` (flag 1: entering FILE, 2: returning to it, 3: a
  system header). GCC manual, "Preprocessor Output" and ``-dI`` in "Preprocessor Options".
  Only the preprocessor writes a line at column 0 starting ``#``: a macro expanding to ``#``
  first on a line is printed after a blank, so a source cannot forge a marker that way (the
  ``#line`` directive and GNU markers written in a source can: the include check refuses
  those in the extension's files).
- ``-MD -MF FILE``: every file the preprocessor opened, in Make syntax (GCC manual, ``-M``).
  These are the files really read, whatever line markers the sources write.

:func:`search_dirs` asks the compiler (``-E -v``) where it looks for ``<...>`` headers: the
standard library's system directories (and any the environment adds, ``CPATH`` or a Nix
compiler wrapper's ``-isystem``). Everything here runs the compiler as an argv (no shell),
with ``LC_ALL=C``, a time bound and the output in files of a caller's work directory.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from lemonpack.errors import one_line

#: Seconds one preprocessor run may take (a translation unit's includes are bounded by GCC's
#: include depth of 200; this bounds the rest).
TIMEOUT = 120.0

_MARKER = re.compile(rb'# (\d+) "((?:[^"\\]|\\.)*)"((?: \d)*)\s*\Z')
_DIRECTIVE = re.compile(rb'#(include_next|include|import) ([<"])(.*)([>"])\s*\Z')


class NoCompiler(Exception):
    """The C++ compiler cannot be run (not found, or it fails on an empty input); ``str()``
    says why, naming the program."""


@dataclass(frozen=True)
class Toolchain:
    """A C++ compiler ready to preprocess: ``cxx`` (the program, resolved on PATH), ``flags``
    (those of the compile) and ``system_dirs``: the real paths of the directories it searches
    for ``<...>`` headers (:func:`search_dirs`)."""

    cxx: str
    flags: tuple[str, ...]
    system_dirs: tuple[str, ...]


@dataclass(frozen=True)
class Marker:
    """A line marker: the ``line`` of ``file`` (as the compiler wrote it, unescaped) the next
    output line is, and its ``flags`` (1 entering, 2 returning, 3 system header, 4 C)."""

    line: int
    file: str
    flags: frozenset[int]


@dataclass(frozen=True)
class Directive:
    """An executed include directive: ``kind`` (``include``, ``include_next``, ``import``),
    ``delim`` (``<`` or ``"``) and ``name`` as the preprocessor read it (macros expanded)."""

    kind: str
    delim: str
    name: str

    def spelled(self) -> str:
        """``#include <name>`` / ``#include "name"``."""
        return f"#{self.kind} {self.delim}{self.name}{'>' if self.delim == '<' else self.delim}"


@dataclass(frozen=True)
class Run:
    """One preprocessor run: ``returncode``, ``stderr`` (text), ``output`` (the ``-E -dI``
    text's file) and ``deps``: every file read, as written in the ``-MF`` file (empty when
    the run failed before writing it)."""

    returncode: int
    stderr: str
    output: Path
    deps: tuple[str, ...]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    return env


@functools.lru_cache(maxsize=8)
def search_dirs(cxx: str, flags: tuple[str, ...]) -> tuple[str, ...]:
    """The real paths of the directories ``cxx`` with ``flags`` searches for ``#include
    <...>``, in its order: what ``cxx -x c++ -E -v -`` prints between ``#include <...> search
    starts here:`` and ``End of search list.`` (GCC and Clang both). Raises
    :class:`NoCompiler` when the program cannot run or prints no such list."""
    argv = [cxx, *flags, "-x", "c++", "-E", "-v", "-o", os.devnull, "-"]
    try:
        r = subprocess.run(argv, input="", capture_output=True, text=True, errors="replace", env=_env(),
                           timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NoCompiler(one_line(f"cannot run the C++ compiler {cxx!r}: {getattr(e, 'strerror', None) or e}")) from None
    lines = r.stderr.splitlines()
    try:
        start = lines.index("#include <...> search starts here:") + 1
        end = lines.index("End of search list.", start)
    except ValueError:
        raise NoCompiler(one_line(f"the C++ compiler {cxx!r} printed no include search list (exit {r.returncode}): "
                                  f"{r.stderr.strip()[:300]}")) from None
    dirs = []
    for line in lines[start:end]:
        d = line.strip()
        if d.endswith(" (framework directory)"):
            d = d[: -len(" (framework directory)")]
        if d:
            dirs.append(os.path.realpath(d))
    return tuple(dict.fromkeys(dirs))


def toolchain(cxx: str | None, flags: Sequence[str]) -> Toolchain:
    """The :class:`Toolchain` of ``cxx`` (default ``$CXX`` or ``g++``) with ``flags``. Raises
    :class:`NoCompiler` naming the program when it is not on PATH or does not run."""
    name = cxx or os.environ.get("CXX") or "g++"
    found = shutil.which(name)
    if found is None:
        raise NoCompiler(f"the C++ compiler {name!r} is not on PATH (set CXX, or install g++)")
    return Toolchain(found, tuple(flags), search_dirs(found, tuple(flags)))


def preprocess(tc: Toolchain, source: Path, include_dir: Path, work: Path, stem: str,
               after: Path | None = None) -> Run:
    """Preprocess ``source`` (absolute) with ``-I include_dir`` into ``work/stem.i`` and
    ``work/stem.d`` (see the module docstring); ``after``: a directory searched last
    (``-idirafter``, after the system directories: it can only supply a file found nowhere
    else). Never raises for the source's content: a failing or timed-out run is a
    :class:`Run` with a non-zero ``returncode`` (``-9`` for the timeout) and what the
    compiler said."""
    out, dep = work / f"{stem}.i", work / f"{stem}.d"
    argv = [tc.cxx, *tc.flags, "-I", str(include_dir), *(["-idirafter", str(after)] if after else []),
            "-E", "-dI", "-MD", "-MF", str(dep), "-o", str(out), str(source)]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, errors="replace", env=_env(), cwd=work,
                           timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        code, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired:
        code, err = -9, f"the preprocessor did not finish in {TIMEOUT:.0f} s"
    except OSError as e:
        code, err = -1, f"cannot run {tc.cxx}: {e.strerror or e}"
    deps: tuple[str, ...] = ()
    if code == 0:
        try:
            deps = tuple(parse_deps(dep.read_text(encoding="utf-8", errors="surrogateescape")))
        except OSError:
            deps = ()
    if not out.exists():
        out.write_bytes(b"")
    return Run(code, err, out, deps)


_NOT_FOUND = re.compile(r"(?m)^(.*?):(\d+):\d+: fatal error: (.+): No such file or directory$")


def not_found(stderr: str) -> tuple[str, int, str] | None:
    """``(file, line, header name)`` of GCC's ``FILE:LINE:COL: fatal error: NAME: No such
    file or directory`` (the preprocessor stops at the first header it cannot find), or None."""
    m = _NOT_FOUND.search(stderr)
    return (m.group(1), int(m.group(2)), m.group(3)) if m else None


def missing_header(stderr: str) -> str | None:
    """The header name of :func:`not_found`, or None."""
    found = not_found(stderr)
    return found[2] if found else None


def parse_deps(text: str) -> list[str]:
    """The prerequisites of a ``-MD`` dependency file (``target: a b \\`` continued lines;
    ``\\ `` an escaped space, ``$$`` a ``$``, ``\\#`` a ``#``), in order, the target left out."""
    text = text.replace("\\\n", " ")
    _, sep, rest = text.partition(": ")
    if not sep:
        return []
    out: list[str] = []
    cur: list[str] = []
    i, n = 0, len(rest)
    while i < n:
        c = rest[i]
        if c == "\\" and i + 1 < n and rest[i + 1] in " #\\":
            cur.append(rest[i + 1])
            i += 2
            continue
        if c == "$" and i + 1 < n and rest[i + 1] == "$":
            cur.append("$")
            i += 2
            continue
        if c.isspace():
            if c == "\n" and cur:
                out.append("".join(cur))
                cur = []
                break  # GCC writes one rule; phony targets (-MP) would follow
            if cur:
                out.append("".join(cur))
                cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    if cur:
        out.append("".join(cur))
    return out


def _unquote(raw: bytes) -> str:
    """A line marker's file name: GCC escapes ``\\`` and ``"`` with a backslash (and writes
    other bytes as they are)."""
    return re.sub(rb"\\(.)", lambda m: b"\n" if m.group(1) == b"n" else m.group(1), raw).decode(
        "utf-8", errors="surrogateescape")


def read_output(path: Path) -> Iterator[tuple[int, Marker | Directive | None, bool]]:
    """The ``-E -dI`` text at ``path``, one item per line: ``(line, item, blank)`` where
    ``item`` is a :class:`Marker`, a :class:`Directive` or ``None`` for any other line,
    ``blank`` tells a line of blanks, and ``line`` is the line's number in the file the last
    marker named, counted as the compiler does (a marker sets the next line's number, every
    other output line adds one). Streams: memory does not grow with the output."""
    line = 1
    with open(path, "rb") as f:
        for raw in f:
            text = raw.rstrip(b"\r\n")
            if text.startswith(b"# ") and text[2:3].isdigit():
                m = _MARKER.match(text)
                if m:
                    mk = Marker(int(m.group(1)), _unquote(m.group(2)), frozenset(int(x) for x in m.group(3).split()))
                    line = mk.line
                    yield line, mk, False
                    continue
            if text.startswith(b"#i"):
                d = _DIRECTIVE.match(text)
                if d and (d.group(2) == b"<") == (d.group(4) == b">"):
                    yield line, Directive(d.group(1).decode(), d.group(2).decode(),
                                          d.group(3).decode("utf-8", errors="surrogateescape")), False
                    line += 1
                    continue
            yield line, None, not text.strip()
            line += 1


__all__ = ["Directive", "Marker", "NoCompiler", "Run", "TIMEOUT", "Toolchain", "missing_header", "not_found",
           "parse_deps",
           "preprocess",
           "read_output", "search_dirs", "toolchain"]
