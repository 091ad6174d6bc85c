"""Load a recipe file into a frozen :class:`~lemonpack.contract.model.Recipe`.

Validation (RFC section 4, strict: reject rather than ignore) runs in three passes and
reports every problem of a file together, each naming the file, the JSON path of the
field and the rule: (1) reading and JSON syntax (:func:`read_json_text`,
:func:`parse_json_strict`: size, UTF-8, nesting depth, duplicate keys, lone surrogates,
numbers out of range), (2) the shipped JSON Schema (draft 2020-12,
:mod:`lemonpack.contract.schemalock`) through ``jsonschema`` (``pattern`` anchored as
ECMA-262 anchors it, a linear ``uniqueItems``, integers written without a fraction or
exponent), (3) the semantic rules of :mod:`lemonpack.contract.rules`.

Any input gets an answer (problems, or a model) in time and memory linear in its size:
nothing here raises for a file's content, and recursion is bounded by :data:`MAX_DEPTH`.
Loading never touches the network or the hardware.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from lemonpack import jsonpath
from lemonpack.contract.model import (ArchOverride, ExecFields, HealthProbe, PlatformBlock, Recipe, freeze)
from lemonpack.contract.rules import semantic_problems
from lemonpack.contract.schemalock import load_schema
from lemonpack.canonical import canonical_json
from lemonpack.errors import ManifestError, Problem
from lemonpack.files import open_regular

_EXEC_FIELDS = tuple(f for f in ExecFields.__dataclass_fields__)


#: Largest recipe file read (bytes). Real recipes are a few KB; the bound keeps memory
#: flat whatever a file claims to be.
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
    duplicates: list[tuple[dict, str, Any]] = []  # (object, key, overwritten value): kept alive

    def hook(pairs: list[tuple[str, Any]]) -> dict:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
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
    if not duplicates and not _SURROGATE_IN_TEXT.search(text):
        return doc, []  # nothing to locate: no walk
    return doc, _walk_problems(doc, duplicates, file)


def _walk_problems(doc: Any, duplicates: list[tuple[dict, str, Any]], file: str) -> list[Problem]:
    """Paths of the duplicate keys and lone surrogates of a parsed document (iterative)."""
    paths: dict[int, tuple] = {}
    problems: list[Problem] = []

    def walk(root: Any, base: tuple, report: bool) -> None:
        stack = [(root, base)]
        while stack:
            value, path = stack.pop()
            if isinstance(value, dict):
                paths[id(value)] = path
                for key, child in value.items():
                    if report and _SURROGATE.search(key):
                        problems.append(Problem(file, jsonpath.join(path + (key,)), "invalid-unicode",
                                                f"key {_short(key)} holds a lone UTF-16 surrogate: not Unicode text"))
                    stack.append((child, path + (key,)))
            elif isinstance(value, list):
                paths[id(value)] = path
                stack.extend((child, path + (i,)) for i, child in enumerate(value))
            elif report and isinstance(value, str) and _SURROGATE.search(value):
                problems.append(Problem(file, jsonpath.join(path), "invalid-unicode",
                                        f"{_short(value)} holds a lone UTF-16 surrogate: not Unicode text"))

    walk(doc, (), True)
    # a duplicate inside a value that a later duplicate overwrote: locate it through that key
    for obj, key, old in reversed(duplicates):
        if id(obj) in paths and isinstance(old, (dict, list)):
            walk(old, paths[id(obj)] + (key,), False)
    for obj, key, _ in duplicates:
        where = paths.get(id(obj), ())
        problems.append(Problem(file, jsonpath.join(where + (key,)), "duplicate-key",
                                f"duplicate key {_short(key)} in one object (JSON names must be unique, RFC 8259 section 4)"))
    return problems


def _short(value: Any, limit: int = 120) -> str:
    """``repr(value)`` cut to ``limit`` characters (bounded work for huge values)."""
    if isinstance(value, (list, dict)) and len(value) > limit:
        return f"<{'array' if isinstance(value, list) else 'object'} of {len(value)} items>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + " ...'"


def _ecma_regex(pattern: str) -> str:
    """A JSON Schema (ECMA-262) pattern as a Python regex: ``$`` outside a character
    class becomes ``\\Z``, because ECMA ``$`` (no multiline flag) matches only at the end
    of input while Python's also matches before a final newline."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if ch == "[" and not in_class:
            in_class = True
        elif ch == "]" and in_class:
            in_class = False
        elif ch == "$" and not in_class:
            ch = r"\Z"
        out.append(ch)
        i += 1
    return "".join(out)


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(_ecma_regex(pattern))


def _pattern_keyword(validator, pattern, instance, schema):
    """``pattern`` with ECMA-262 anchoring (see :func:`_ecma_regex`)."""
    if validator.is_type(instance, "string") and not _compiled(pattern).search(instance):
        yield jsonschema.ValidationError(f"{_short(instance)} does not match {pattern!r}")


def _equality_key(value: Any) -> Any:
    """A hashable key equal for JSON-Schema-equal values (1 == 1.0, true != 1, objects
    compare regardless of key order). Recursion is bounded by :data:`MAX_DEPTH`."""
    if isinstance(value, bool) or value is None:
        return ("c", value)
    if isinstance(value, (int, float)):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("l", tuple(_equality_key(v) for v in value))
    if isinstance(value, dict):
        return ("o", frozenset((k, _equality_key(v)) for k, v in value.items()))
    return ("?", id(value))


def _unique_items_keyword(validator, unique, instance, schema):
    """``uniqueItems`` in linear time (jsonschema's own is quadratic on some inputs):
    one error per repeated item, at the repeat's index."""
    if not unique or not validator.is_type(instance, "array"):
        return
    first: dict[Any, int] = {}
    for i, item in enumerate(instance):
        key = _equality_key(item)
        if key in first:
            yield jsonschema.ValidationError(f"{_short(item)} repeats item [{first[key]}]; items must be unique",
                                             path=[i])
        else:
            first[key] = i


def _additional_properties_keyword(validator, aP, instance, schema):
    """``additionalProperties`` as ``jsonschema``'s, but visiting the extra members in the
    document's order (``jsonschema`` collects them in a ``set``, whose order changes with
    ``PYTHONHASHSEED``): errors then come in the same order in every run, which the bounded
    report (:func:`bounded_schema_problems`) needs to be deterministic."""
    if not validator.is_type(instance, "object"):
        return
    props = schema.get("properties", {})
    patterns = "|".join(schema.get("patternProperties", {}))
    extras = [k for k in instance if k not in props and not (patterns and re.search(patterns, k))]
    if validator.is_type(aP, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], aP, path=extra)
    elif not aP and extras:
        shown = ", ".join(repr(e) for e in sorted(extras[:20], key=str)) + (", ..." if len(extras) > 20 else "")
        verb = "was" if len(extras) == 1 else "were"
        yield jsonschema.ValidationError(f"Additional properties are not allowed ({shown} {verb} unexpected)")


def _written_integer(checker, instance: Any) -> bool:
    """JSON Schema ``integer``, narrowed to numbers *written* as integers: ``1.0`` and ``1e0``
    parse as floats in most JSON parsers (Python, Go), so tools would read such a recipe
    differently; lemonpack refuses them (docs/recipes-and-policy.md, policy ``integer``)."""
    return isinstance(instance, int) and not isinstance(instance, bool)


@lru_cache(maxsize=None)
def _validator(major: int = 1) -> jsonschema.protocols.Validator:
    """The ``jsonschema`` validator of contract ``major``'s schema (draft 2020-12, checked
    against its metaschema once), with three documented narrowings: ECMA-262 ``pattern``
    anchoring, a linear ``uniqueItems``, and integers written as integers."""
    return strict_validator(load_schema(major))


def strict_validator(schema: dict) -> jsonschema.protocols.Validator:
    """A ``jsonschema`` validator for one of lemonpack's own schemas (recipe contract,
    ``extension.json``): the draft its ``$schema`` names, the schema checked against that
    metaschema, the three narrowings of :func:`_validator`, and every local ``$ref``
    (``#/$defs/...``) inlined first (:func:`inline_local_refs`): ``jsonschema`` resolves a
    ``$ref`` through ``referencing`` at every use, which was most of the validation time
    (2,000 extension manifests: 4.0 s of profile, 3.3 s under ``$ref``). Errors are
    unchanged: their document paths do not depend on how the schema reached a value."""
    base = jsonschema.validators.validator_for(schema)
    base.check_schema(schema)
    checker = base.TYPE_CHECKER.redefine("integer", _written_integer)
    cls = jsonschema.validators.extend(base, {"pattern": _pattern_keyword, "uniqueItems": _unique_items_keyword,
                                              "additionalProperties": _additional_properties_keyword},
                                       type_checker=checker)
    return cls(inline_local_refs(schema))


def inline_local_refs(schema: dict) -> dict:
    """``schema`` with each ``{"$ref": "#/$defs/NAME"}`` replaced by (a copy of) the
    definition it names, recursively; a ``$ref`` with sibling keywords becomes those
    siblings plus ``"allOf": [definition]`` (draft 2020-12 applies both). A reference that
    is not local or that is part of a cycle is left as it is (``jsonschema`` still resolves
    it; ``$defs`` stays in the result for that). Pure: ``schema`` is not modified."""
    defs = schema.get("$defs", {})

    def walk(node: Any, active: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [walk(v, active) for v in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and "/" not in ref[8:]:
            name = ref[8:]
            if name in defs and name not in active:
                target = walk(defs[name], active + (name,))
                rest = {k: walk(v, active) for k, v in node.items() if k != "$ref"}
                if not rest:
                    return target
                return {**rest, "allOf": [*rest.get("allOf", []), target]}
        return {k: (v if k == "$defs" else walk(v, active)) for k, v in node.items()}

    return walk(schema, ())


class DocumentOrder:
    """Sort key putting schema errors in document order: object members in the order the
    file gives them, array items by index (each object's key positions computed once)."""

    def __init__(self, doc: Any):
        self.doc, self.positions = doc, {}

    def __call__(self, err: jsonschema.ValidationError) -> tuple:
        node, key = self.doc, []
        for part in err.absolute_path:
            if isinstance(node, dict):
                where = self.positions.get(id(node))
                if where is None:
                    where = self.positions[id(node)] = {k: i for i, k in enumerate(node)}
                key.append(where.get(part, len(where)))
                node = node.get(part)
            elif isinstance(node, list) and isinstance(part, int):
                key.append(part)
                node = node[part] if 0 <= part < len(node) else None
            else:
                key.append(0)
                node = None
        return tuple(key)


#: Problems reported per file; the rest are counted in one last problem ("and N more").
MAX_PROBLEMS = 200
#: Schema errors examined per file: ``jsonschema`` finds them lazily (``iter_errors``), and
#: past this many the check stops (the report then says "at least"), so time and memory stay
#: bounded whatever the input (a 4 MiB array of wrong items is two million errors).
MAX_SCHEMA_ERRORS = 2000


#: A document kind's own wording for some schema errors: ``explain(err, path, file)`` returns the
#: problems ``err`` stands for, ``[]`` to drop it (an ``if``/``allOf`` wrapper whose inner errors
#: are reported), or ``None`` for the shared wording (:func:`schema_error_problems`).
Explain = Callable[[jsonschema.ValidationError, list, str], "Iterable[Problem] | None"]


def schema_problems(doc: Any, file: str, limit: int = MAX_PROBLEMS, *,
                    validator: jsonschema.protocols.Validator | None = None,
                    explain: Explain | None = None) -> list[Problem]:
    """Problems the JSON Schema finds, one per offending field, in document order, at most
    ``limit`` of them followed, when more were found, by one ``more-problems`` problem
    saying how many (:func:`bounded_schema_problems`). ``validator`` and ``explain``: the
    document kind's (default: the recipe schema and its wording)."""
    out, more, stopped = bounded_schema_problems(doc, file, limit, validator=validator, explain=explain)
    return out + ([more_problems(file, more, stopped)] if more or stopped else [])


def bounded_schema_problems(doc: Any, file: str, limit: int = MAX_PROBLEMS, *,
                            validator: jsonschema.protocols.Validator | None = None,
                            explain: Explain | None = None) -> tuple[list[Problem], int, bool]:
    """``(problems, more, stopped)``: the schema's problems, streamed and bounded. The one
    schema checker of every strict document kind (recipes, extension.json, release image
    definitions, catalogue sources): ``validator`` is the kind's (default: the recipe
    schema), ``explain`` its own wording (default: the recipe's, :func:`recipe_explain`).

    Errors come one at a time from ``jsonschema``'s lazy ``iter_errors`` and each is turned
    into its problems at once (the error object, ~3.6 KB with its context, is dropped); at
    most :data:`MAX_SCHEMA_ERRORS` errors are examined (``stopped``: the check stopped there)
    and at most ``limit`` problems kept: the first in document order, ties by path, rule and
    message, so the report is deterministic. ``more``: problems found but not kept."""
    import heapq

    order = DocumentOrder(doc)
    kept: list[tuple] = []  # the `limit` smallest keys; heap top = the largest kept (_Reverse)
    seen = errors = 0
    stopped = False
    if validator is None:
        validator, explain = _validator(), recipe_explain if explain is None else explain
    for err in validator.iter_errors(doc):
        errors += 1
        if errors > MAX_SCHEMA_ERRORS:
            stopped = True
            break
        base = order(err)
        for p in schema_error_problems(err, file, explain):
            seen += 1
            key = (base, p.path, p.rule, p.message)
            if len(kept) < limit:
                heapq.heappush(kept, (_Reverse(key), p))
            elif key < kept[0][0].key:
                heapq.heapreplace(kept, (_Reverse(key), p))
        del err
    out = [p for _, p in sorted(kept, key=lambda t: t[0].key)]
    return out, seen - len(out), stopped


class _Reverse:
    """Inverts the order of ``key`` (heapq is a min-heap; the kept set needs its largest first)."""

    __slots__ = ("key",)

    def __init__(self, key: tuple):
        self.key = key

    def __lt__(self, other: "_Reverse") -> bool:
        return other.key < self.key


def more_problems(file: str, more: int, stopped: bool = False) -> Problem:
    """The last problem of a capped list: ``and N more problems`` (``at least`` when the check
    stopped before the end of the file)."""
    what = f"at least {more} more problems (the check stopped after {MAX_SCHEMA_ERRORS} schema errors)" \
        if stopped else f"{more} more problems"
    return Problem(file, "", "more-problems", f"and {what}: fix these and run lint again")


def schema_error_problems(err: jsonschema.ValidationError, file: str,
                          explain: Explain | None = None) -> Iterable[Problem]:
    """The :class:`Problem` lines (file, JSON path, rule, message) one jsonschema error stands
    for, in the one rule vocabulary of every strict document kind: ``unknown-field`` (one per
    unknown member of an ``additionalProperties`` error), ``missing-field`` (at the missing
    field's own path), ``invalid-key`` (``propertyNames``), ``integer`` (a whole number written
    as a float), ``duplicate-item``, ``schema-enum`` (with the allowed values), and
    ``schema-<keyword>`` with jsonschema's message for the rest. ``explain`` (the document
    kind's own wording, see :data:`Explain`) is asked first."""
    path = list(err.absolute_path)
    if explain is not None:
        own = explain(err, path, file)
        if own is not None:
            yield from own
            return
    where = jsonpath.join(path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = set(err.schema.get("properties", {}))
        for key in err.instance:
            if key not in allowed:
                yield Problem(file, jsonpath.join(path + [key]), "unknown-field", f"unknown field {_short(key)}")
        return
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        yield Problem(file, jsonpath.join(path + [missing]) if path else missing, "missing-field",
                      f"required field {missing!r} is missing")
        return
    if err.validator == "propertyNames" or "propertyNames" in err.schema_path:
        key = err.instance
        target = path + [key] if isinstance(key, str) else path
        yield Problem(file, jsonpath.join(target), "invalid-key", f"invalid key {_short(key)}")
        return
    if (err.validator == "type" and err.validator_value == "integer" and isinstance(err.instance, float)
            and math.isfinite(err.instance) and err.instance.is_integer()):
        yield Problem(file, where, "integer",
                      f"{_short(err.instance)} is written with a fraction or an exponent; this field is an "
                      f"integer: write {int(err.instance)} (a JSON number written {_short(err.instance)} is a "
                      "float to most parsers)")
        return
    if err.validator == "uniqueItems":
        yield Problem(file, where, "duplicate-item", err.message)
        return
    if err.validator == "enum" and isinstance(err.validator_value, list):
        allowed = ", ".join(str(v) for v in err.validator_value)
        yield Problem(file, where, "schema-enum", f"{_short(err.instance)} is not one of: {_short_text(allowed)}")
        return
    yield Problem(file, where, f"schema-{err.validator}", _short_text(err.message))


def _short_text(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 10] + " ..."


def recipe_explain(err: jsonschema.ValidationError, path: list, file: str) -> list[Problem] | None:
    """The recipe contract's own wording for schema errors (see :data:`Explain`): unknown
    capabilities, host OSes and accelerators, ``requested_ports``, binary names, recipe ids,
    https sources, sha256 forms (seed 000 sections 4 and 9)."""
    where = jsonpath.join(path)
    out: list[Problem] = []
    if err.validator == "propertyNames" or "propertyNames" in err.schema_path:
        rule = _name_rule(path)
        if rule == "invalid-key":
            return None
        key = err.instance
        out.append(Problem(file, jsonpath.join(path + [key] if isinstance(key, str) else path), rule,
                           _name_message(path, key)))
    elif (err.validator == "type" and path == ["requested_ports"] and err.instance == 1
          and isinstance(err.instance, float)):
        out.append(Problem(file, where, "integer",
                           f"{_short(err.instance)} is written with a fraction or an exponent; this field is an "
                           f"integer: write 1 (a JSON number written {_short(err.instance)} is a float to most "
                           "parsers) (RFC 4.3: requested_ports is the integer 1)"))
    elif err.validator == "enum" and path and path[0] == "capabilities":
        out.append(Problem(file, where, "unknown-capability", f"unknown capability {_short(err.instance)}"))
    elif path == ["requested_ports"] and err.validator in ("minimum", "maximum"):
        out.append(Problem(file, where, "requested-ports",
                           f"requested_ports is {_short(err.instance)}; contract v1 supports exactly 1 (RFC 4.3: "
                           "the {port} token)"))
    elif err.validator == "pattern" and path and path[-1] == "binary":
        out.append(Problem(file, where, "binary-name",
                           f"binary {_short(err.instance)} must be a bare file name: a letter or digit, then "
                           "letters, digits, '.', '_' or '-' (no path separator, no leading '-' or '.')"))
    elif err.validator == "pattern" and path == ["recipe"]:
        out.append(Problem(file, where, "recipe-id",
                           f"recipe id {_short(err.instance)} must match ^[a-z0-9][a-z0-9_-]{{1,63}}$"))
    elif err.validator == "pattern" and path and path[-1] == "source":
        out.append(Problem(file, where, "source-https", f"source {_short(err.instance)} must be an https:// URL "
                           "(plain http is only for mirrors: --mirror)"))
    elif err.validator == "pattern" and path and path[-1] == "sha256":
        out.append(Problem(file, where, "sha256-format",
                           f"sha256 {_short(err.instance)} must be 'sha256:' and 64 lowercase hex digits"))
    else:
        return None
    return out


def _name_rule(path: list) -> str:
    if path and path[0] in ("capability_enable_args", "endpoints"):
        return "unknown-capability"
    if path == ["platforms"]:
        return "unknown-os"
    if len(path) == 2 and path[0] == "platforms":
        return "unknown-accelerator"
    return "invalid-key"


def _name_message(path: list, key: Any) -> str:
    rule = _name_rule(path)
    if rule == "unknown-capability":
        return f"unknown capability {_short(key)}"
    if rule == "unknown-os":
        return f"unknown host OS {_short(key)} (linux, darwin, windows)"
    if rule == "unknown-accelerator":
        return f"unknown accelerator {_short(key)}"
    return f"invalid key {_short(key)}"


def check_document(doc: Any, file: str) -> list[Problem]:
    """All schema and semantic problems of a parsed document (empty list: valid)."""
    if not isinstance(doc, dict):
        kind = "null" if doc is None else type(doc).__name__.replace("dict", "object").replace("list", "array")
        return [Problem(file, "", "document-type", f"the document must be a JSON object, not {kind}")]
    problems, more, stopped = bounded_schema_problems(doc, file)
    problems += semantic_problems(doc, file)
    seen: set[tuple[str, str, str]] = set()
    unique = []
    for p in problems:
        if (p.path, p.rule, p.message) not in seen:
            seen.add((p.path, p.rule, p.message))
            unique.append(p)
    if len(unique) > MAX_PROBLEMS:  # the semantic rules' problems come after the schema's
        more += len(unique) - MAX_PROBLEMS
        unique = unique[:MAX_PROBLEMS]
    return unique + ([more_problems(file, more, stopped)] if more or stopped else [])


def check_text(text: str, file: str) -> tuple[Any, list[Problem]]:
    """Parse and check JSON text; returns ``(document or None, problems)``. Never raises."""
    doc, problems = parse_json_strict(text, file)
    if any(p.rule == "json-syntax" for p in problems):
        return None, problems
    return doc, problems + check_document(doc, file)


def check_file(path: str | Path) -> tuple[Any, list[Problem]]:
    """Read, parse and check the recipe file at ``path`` (see :func:`read_json_text`);
    returns ``(document or None, problems)``. Never raises for any file content."""
    text, problems = read_json_text(path)
    if text is None:
        return None, problems
    return check_text(text, str(path))


def load_recipe_text(text: str, file: str = "<memory>") -> Recipe:
    """Validate JSON text and build the frozen :class:`Recipe`.

    Raises :class:`~lemonpack.errors.ManifestError` carrying every problem found.
    """
    doc, problems = check_text(text, file)
    if problems:
        raise ManifestError(problems)
    return build_model(doc, file)


def load_recipe(path: str | Path) -> Recipe:
    """Read ``path`` (UTF-8 JSON) and return its validated :class:`Recipe`.

    Raises :class:`ManifestError` for an unreadable file or any rule violation.
    """
    doc, problems = check_file(path)
    if problems:
        raise ManifestError(problems)
    return build_model(doc, str(path))


def _strip(sha: str | None) -> str | None:
    return sha.removeprefix("sha256:") if sha else None


def _exec_kwargs(raw: dict) -> dict[str, Any]:
    kw: dict[str, Any] = {}
    for name in _EXEC_FIELDS:
        if name in raw:
            value = raw[name]
            kw[name] = _strip(value) if name == "sha256" else freeze(value)
    return kw


def build_model(doc: dict, file: str) -> Recipe:
    """Turn a document that passed :func:`check_document` into a frozen :class:`Recipe`."""
    platforms: dict[str, dict[str, PlatformBlock]] = {}
    for os_name, accels in doc["platforms"].items():
        platforms[os_name] = {}
        for accel, raw in accels.items():
            overrides = tuple(ArchOverride(pattern=p, **_exec_kwargs(o)) for p, o in raw.get("arch", {}).items())
            platforms[os_name][accel] = PlatformBlock(os=os_name, accelerator=accel, arch=overrides,
                                                      **_exec_kwargs(raw))
    probe = HealthProbe(**doc["health_probe"]) if "health_probe" in doc else HealthProbe()
    return Recipe(
        file=file,
        recipe=doc["recipe"],
        display_name=doc["display_name"],
        api_contract_version=doc["api_contract_version"],
        capabilities=tuple(doc["capabilities"]),
        platforms=freeze({k: v for k, v in platforms.items()}),
        document=freeze(doc),
        canonical=canonical_json(doc, floats="shortest"),
        extends=doc.get("extends"),
        variant_of=doc.get("variant_of"),
        capability_enable_args=freeze(doc.get("capability_enable_args", {})),
        health_probe=probe,
        requested_ports=doc.get("requested_ports", 1),
        reserved_args=tuple(doc.get("reserved_args", ())),
        slot_policy=doc.get("slot_policy", "standard"),
        model_management=doc.get("model_management", "lemond_managed"),
        default_accelerator=doc.get("default_accelerator"),
        recipe_options=freeze(doc.get("recipe_options", {})),
        source=doc.get("source"),
        sha256=_strip(doc.get("sha256")),
        version_policy=doc.get("version_policy"),
        endpoints=freeze(doc.get("endpoints", {})),
        custom_options=freeze(doc.get("custom_options", [])),
        downsize_endpoint=doc.get("downsize_endpoint"),
        extensions=freeze(doc.get("extensions", {})),
        arch_aliases=tuple(doc.get("arch_aliases", {}).items()),
    )
