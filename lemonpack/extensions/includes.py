"""The include allowlist of community extensions (seed 002 section 5): every ``#include`` of
every source file an extension compiles, scanned where it resolves. Step 2 of
:mod:`lemonpack.extensions.pipeline` and the catalogue's verification call
:func:`include_problems`."""

from __future__ import annotations

import os
import re
from pathlib import Path

from lemonpack.errors import one_line
from lemonpack.safetree import inside, safe_relative_path


_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]*)[>"]')


SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".hxx", ".inl", ".cu", ".hip", ".cuh")


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


#: Largest source file scanned for ``#include`` lines (bytes); a larger one is a reason.
MAX_SOURCE_BYTES = 16 * 2**20


def include_problems(directory: Path) -> list[str]:
    """Reasons a community extension's sources break the include allowlist (seed 002
    section 5): every ``#include`` in a source file under ``directory`` (suffixes
    :data:`SOURCE_SUFFIXES`) must name a public header ``gufo/ext/...`` (no ``..``), a
    standard C++/C header (:data:`STANDARD_HEADERS`), the generated
    ``gufo_ext_constants.hpp``, or (quoted) a file of the extension itself. Each reason
    names ``file:line``.

    Every source is scanned where it resolves: a symlink (to a file or a directory) is judged
    by :func:`lemonpack.safetree.symlink_problem`, the rule ``lemonpack release`` and the
    extractor apply, and one that is absolute or resolves outside ``directory`` is a reason
    (its sources would be compiled but never scanned); one that stays inside points at files
    the walk scans at their real place. A source that is not a regular file or is larger than
    :data:`MAX_SOURCE_BYTES` is a reason too."""
    from lemonpack.safetree import symlink_problem

    out: list[str] = []
    top = os.fspath(directory)
    real_top: list[str] = []  # os.path.realpath(top), computed when first needed

    def root() -> str:
        if not real_top:
            real_top.append(os.path.realpath(top))
        return real_top[0]

    scanned: set[str] = set()  # sources scanned, by their resolved path relative to the directory
    stack = [""]  # directories to walk, relative to top (symlinked ones are judged, not walked)
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
                    out.append(one_line(f"{entry.path}: {why}: a symlink in an extension must stay inside its "
                                        "directory (its sources are compiled, so they must be scanned)"))
                    continue
                real = os.path.realpath(entry.path)  # inside: scanned where it resolves, once
                if not entry.name.endswith(SOURCE_SUFFIXES) or not os.path.isfile(real):
                    continue
                rel = os.path.relpath(real, root())
                path = os.path.join(top, rel)
            elif entry.is_dir(follow_symlinks=False):
                subdirs.append(rel)
                continue
            elif entry.name.endswith(SOURCE_SUFFIXES):
                path = entry.path
            else:
                continue
            if rel in scanned:
                continue
            scanned.add(rel)
            out += _scan_source(path, root)
        stack += reversed(subdirs)
    return out


def _scan_source(path: str, root) -> list[str]:
    """The include-allowlist reasons of one source file (``path:line: ...``); ``root()``
    gives the extension directory's real path."""
    from lemonpack.strictjson import read_source_bytes

    data, problems = read_source_bytes(path, limit=MAX_SOURCE_BYTES)
    if data is None:
        return [one_line(f"{path}: cannot scan source: {p.message}") for p in problems]
    out: list[str] = []
    if b"include" not in data:
        return out
    for lineno, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        m = _INCLUDE.match(line)
        if not m:
            continue
        kind, header = m.groups()
        if _public_or_standard(header):
            continue
        if kind == '"':  # the extension's own file, where the source really is
            full = os.path.realpath(os.path.join(os.path.dirname(os.path.realpath(path)), header))
            if inside(full, root()) and os.path.isfile(full):
                continue
        out.append(one_line(f"{path}:{lineno}: #include {kind}{header}{'>' if kind == '<' else kind} is not "
                            "allowed: community extensions may include only gufo/ext/... public headers, "
                            "standard headers and their own files"))
    return out


def _public_or_standard(header: str) -> bool:
    """A public header ``gufo/ext/...`` (a safe relative path: no ``.``, ``..`` or empty
    part, no backslash: :func:`lemonpack.safetree.path_problem`), a standard header or the
    generated constants header."""
    if header.startswith("gufo/ext/"):
        return safe_relative_path(header)
    return header in STANDARD_HEADERS or header in GENERATED_HEADERS


__all__ = ["GENERATED_HEADERS", "MAX_SOURCE_BYTES", "SOURCE_SUFFIXES", "STANDARD_HEADERS", "include_problems"]
