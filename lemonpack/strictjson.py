"""Strict JSON for every description file lemonpack reads (recipes, extension.json, release
image definitions, catalogue sources, the model registry): reading a file a user names within a
size bound, decoding UTF-8, and parsing under RFC 8259 plus I-JSON (RFC 7493, section 2).

Each failure is a :class:`~lemonpack.errors.Problem` (file, JSON path, rule, message) in the one
rule vocabulary of :mod:`lemonpack.schemacheck`'s schema problems: ``unreadable``, ``encoding``,
``json-syntax``, ``duplicate-key``, ``invalid-unicode``. Any input gets an answer in time and
memory linear in its size; nothing here raises for a file's content, and nesting is bounded by
:data:`MAX_DEPTH` before the parser recurses.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from lemonpack import jsonpath
from lemonpack.errors import MAX_PROBLEMS, MoreProblems, Problem
from lemonpack.files import open_regular

#: Largest description file read by default (bytes). Real recipes are a few KB; the bound keeps
#: memory flat whatever a file claims to be.
MAX_FILE_BYTES = 4 * 1024 * 1024

#: Deepest nesting of arrays/objects accepted. Contract v1 needs 6 levels (platforms,
#: OS, accelerator, arch, pattern, env); the open bags (``recipe_options``,
#: ``extensions``) get generous room. Checked before parsing, so neither the JSON parser
#: nor the schema validator ever recurses deeper than this.
MAX_DEPTH = 64

#: Longest integer literal accepted (digits). Python refuses to convert more than 4300
#: digits; no field of the contract needs more than a handful.
MAX_INT_DIGITS = 100

_SURROGATE = re.compile("[\ud800-\udfff]")
#: How a lone surrogate can get into a parsed document: an escape, or a raw one in a str given
#: to :func:`check_text` (decoded UTF-8 cannot hold one).
_SURROGATE_IN_TEXT = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer with {digits} digits is out of range (at most {MAX_INT_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range for a JSON number (IEEE 754 double)")
    return value


def nesting_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` in JSON ``text``, ignoring brackets inside strings.

    Linear in ``len(text)``; tolerant of malformed text (the parser reports that).
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    depth = deepest = 0
    for ch in brackets:
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        else:
            depth -= 1
    return deepest


def decode_json_bytes(data: bytes, file: str) -> tuple[str | None, list[Problem]]:
    """Decode a description file's bytes as UTF-8 JSON text (RFC 8259 section 8.1).

    A leading UTF-8 byte order mark is ignored (RFC 8259 allows parsers to); other
    encodings and invalid UTF-8 are a problem naming the byte offset. Returns
    ``(text or None, problems)``.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError as e:
        return None, [Problem(file, "", "encoding",
                              f"not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start} is invalid ({e.reason})")]


def read_json_text(path: str | Path) -> tuple[str | None, list[Problem]]:
    """Read ``path`` as UTF-8 JSON text; ``(text or None, problems)``, never raises.

    Refuses (as a problem with rule ``unreadable``) a missing, unreadable or non-regular
    file and one larger than :data:`MAX_FILE_BYTES`; see :func:`decode_json_bytes`.
    """
    file = str(path)
    data, problems = read_source_bytes(path)
    if data is None:
        return None, problems
    return decode_json_bytes(data, file)


def read_source_bytes(path: str | Path, too_large_rule: str = "unreadable",
                      limit: int = MAX_FILE_BYTES) -> tuple[bytes | None, list[Problem]]:
    """The bytes of a source file a user names (a recipe, a catalogue TOML file): ``(bytes or
    None, problems)``, never raises. Refuses, as a problem of rule ``unreadable``, a missing
    or unreadable file and one that is not a regular file (through a symlink is fine: the
    user named it; a fifo is never blocked on: :func:`lemonpack.files.open_regular`), and
    one larger than ``limit`` bytes (rule ``too_large_rule``)."""
    file = str(path)
    try:
        with open_regular(path, follow_symlinks=True) as f:
            data = f.read(limit + 1)
    except OSError as e:
        return None, [Problem(file, "", "unreadable", f"cannot read file: {e.strerror or e}")]
    if len(data) > limit:
        return None, [Problem(file, "", too_large_rule, f"file is larger than {limit} bytes")]
    return data, []


def parse_json_strict(text: str, file: str) -> tuple[Any, list[Problem]]:
    """Parse JSON text strictly (RFC 8259 plus I-JSON, RFC 7493, section 2).

    Problems, each with the JSON path where it has one: duplicate keys
    (``duplicate-key``), ``NaN``/``Infinity`` and numbers out of range, strings or keys
    holding a lone UTF-16 surrogate (``invalid-unicode``: not Unicode, cannot be written
    as UTF-8), nesting deeper than :data:`MAX_DEPTH`. Returns ``(document, problems)``;
    when the text is not usable JSON the document is None and the one problem has rule
    ``json-syntax`` (a None document without it is the JSON ``null``). Linear time; never raises. Used for every description file.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    # fewer openers than the limit cannot nest deeper than it: skip the scan (str.count is fast)
    depth = nesting_depth(text) if text.count("[") + text.count("{") > MAX_DEPTH else 0
    if depth > MAX_DEPTH:
        return None, [Problem(file, "", "json-syntax",
                              f"not accepted JSON: nested {depth} levels deep (at most {MAX_DEPTH})")]
    duplicates: list[tuple[dict, str, Any]] = []  # the first MAX_PROBLEMS: (object, key, overwritten value)
    counted = [0]  # every duplicate key, kept or not

    def hook(pairs: list[tuple[str, Any]]) -> dict:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                counted[0] += 1
                if len(duplicates) < MAX_PROBLEMS:
                    duplicates.append((seen, key, seen[key]))
            seen[key] = value
        return seen

    try:
        doc = json.loads(text, object_pairs_hook=hook, parse_constant=_reject_constant,
                         parse_int=_parse_int, parse_float=_parse_float)
    except json.JSONDecodeError as e:
        return None, [Problem(file, "", "json-syntax", f"not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})")]
    except (ValueError, RecursionError) as e:
        return None, [Problem(file, "", "json-syntax", f"not valid JSON: {e}")]
    surrogates = bool(_SURROGATE_IN_TEXT.search(text))
    if not duplicates and not surrogates:
        return doc, []  # nothing to locate: no walk
    return doc, _walk_problems(doc, duplicates, counted[0] - len(duplicates), file, surrogates)


def _walk(root: Any, base: tuple) -> Any:
    """``(path, value, key_of_dict_entry)`` of every value under ``root`` (``root`` first),
    depth first, iteratively: memory grows with the depth (at most :data:`MAX_DEPTH`), not
    with the document. ``key_of_dict_entry`` is the key when the value is an object's member."""
    yield base, root, None
    path = list(base)
    stack: list[Any] = []
    if isinstance(root, (dict, list)):
        stack.append(iter(root.items()) if isinstance(root, dict) else enumerate(root))
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
            if len(path) > len(base):
                path.pop()
            continue
        key, value = item
        here = (*path, key)
        yield here, value, key if isinstance(key, str) else None
        if isinstance(value, (dict, list)) and value:
            path.append(key)
            stack.append(iter(value.items()) if isinstance(value, dict) else enumerate(value))


def _walk_problems(doc: Any, duplicates: list[tuple[dict, str, Any]], untold: int, file: str,
                   surrogates: bool) -> list[Problem]:
    """The duplicate keys (``duplicates``, the first found, and ``untold`` more) and lone
    surrogates of a parsed document, each with its path: at most :data:`MAX_PROBLEMS` in
    all, then one ``more-problems`` problem counting the rest (``lemonpack.errors.bound``).
    Walks iteratively, keeping the paths only of the objects that hold a kept duplicate."""
    wanted = {id(obj) for obj, _, _ in duplicates}
    paths: dict[int, tuple] = {}
    problems: list[Problem] = []
    more = untold

    def note(problem: Problem) -> None:
        nonlocal more
        if len(problems) < MAX_PROBLEMS:
            problems.append(problem)
        else:
            more += 1

    def walk(root: Any, base: tuple, report: bool) -> None:
        for path, value, key in _walk(root, base):
            if isinstance(value, dict) and id(value) in wanted:
                paths.setdefault(id(value), path)
            if not (report and surrogates):
                continue
            if key is not None and _SURROGATE.search(key):
                note(Problem(file, jsonpath.join(path), "invalid-unicode",
                             f"key {short_repr(key)} holds a lone UTF-16 surrogate: not Unicode text"))
            if isinstance(value, str) and _SURROGATE.search(value):
                note(Problem(file, jsonpath.join(path), "invalid-unicode",
                             f"{short_repr(value)} holds a lone UTF-16 surrogate: not Unicode text"))

    walk(doc, (), True)
    # a duplicate inside a value that a later duplicate overwrote: locate it through that key
    for obj, key, old in reversed(duplicates):
        if id(obj) in paths and isinstance(old, (dict, list)):
            walk(old, paths[id(obj)] + (key,), False)
    for obj, key, _ in duplicates:
        where = paths.get(id(obj), ())
        note(Problem(file, jsonpath.join(where + (key,)), "duplicate-key",
                     f"duplicate key {short_repr(key)} in one object (JSON names must be unique, RFC 8259 section 4)"))
    return problems + ([MoreProblems.of(file, more)] if more else [])


def short_repr(value: Any, limit: int = 120) -> str:
    """``repr(value)`` cut to ``limit`` characters (bounded work for huge values)."""
    if isinstance(value, (list, dict)) and len(value) > limit:
        return f"<{'array' if isinstance(value, list) else 'object'} of {len(value)} items>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + " ...'"



__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "MAX_INT_DIGITS", "decode_json_bytes", "nesting_depth",
           "parse_json_strict", "read_json_text", "read_source_bytes", "short_repr"]
