"""JSON Schema checks of lemonpack's own document kinds (recipes, extension.json, release image
definitions, catalogue sources), with one rule vocabulary for all of them.

:func:`strict_validator` builds the ``jsonschema`` validator of a schema with three documented
narrowings (``pattern`` anchored as ECMA-262 anchors it, a linear ``uniqueItems``, integers
written without a fraction or exponent) and its local ``$ref`` inlined;
:func:`schema_problems` / :func:`bounded_schema_problems` turn its errors into
:class:`~lemonpack.errors.Problem` lines in document order, bounded in number and time
(:data:`MAX_PROBLEMS`, :data:`MAX_SCHEMA_ERRORS`), each document kind adding its own wording
through an :data:`Explain` function. Parsing is :mod:`lemonpack.strictjson`'s.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import Any

import jsonschema

from lemonpack import jsonpath
from lemonpack.errors import MAX_PROBLEMS as ERRORS_MAX_PROBLEMS
from lemonpack.errors import MoreProblems, Problem, bound
from lemonpack.strictjson import short_repr

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


def _pattern_keyword(validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    """``pattern`` with ECMA-262 anchoring (see :func:`_ecma_regex`)."""
    if validator.is_type(instance, "string") and not _compiled(pattern).search(instance):
        yield jsonschema.ValidationError(f"{short_repr(instance)} does not match {pattern!r}")


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


def _unique_items_keyword(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    """``uniqueItems`` in linear time (jsonschema's own is quadratic on some inputs):
    one error per repeated item, at the repeat's index."""
    if not unique or not validator.is_type(instance, "array"):
        return
    first: dict[Any, int] = {}
    for i, item in enumerate(instance):
        key = _equality_key(item)
        if key in first:
            yield jsonschema.ValidationError(f"{short_repr(item)} repeats item [{first[key]}]; items must be unique",
                                             path=[i])
        else:
            first[key] = i


def _additional_properties_keyword(validator: Any, aP: Any, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
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



def strict_validator(schema: dict, *, shipped: bool = False) -> jsonschema.protocols.Validator:
    """A ``jsonschema`` validator for one of lemonpack's own schemas (recipe contract,
    ``extension.json``): the draft its ``$schema`` names, the schema checked against that
    metaschema (``jsonschema.SchemaError`` when it fails; skipped for a ``shipped`` schema, a
    package file that ``tests/test_schemacheck.py`` checks against its metaschema: that check
    is about 20 ms of every command that validates a recipe), the three narrowings (ECMA-262 ``pattern`` anchoring, a linear ``uniqueItems``,
    integers written as integers), and every local ``$ref``
    (``#/$defs/...``) inlined first (:func:`inline_local_refs`): ``jsonschema`` resolves a
    ``$ref`` through ``referencing`` at every use, which was most of the validation time
    (2,000 extension manifests: 4.0 s of profile, 3.3 s under ``$ref``). Errors are
    unchanged: their document paths do not depend on how the schema reached a value."""
    base = jsonschema.validators.validator_for(schema)
    if not shipped:
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
        self.doc = doc
        self.positions: dict[int, dict[Any, int]] = {}  # id(object) -> {key: position}

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


#: Problems reported per file; the rest are counted in one last problem ("and N more"):
#: :data:`lemonpack.errors.MAX_PROBLEMS`, the bound of every file's report (:func:`lemonpack.errors.bound`).
MAX_PROBLEMS = ERRORS_MAX_PROBLEMS
#: Schema errors examined per file: ``jsonschema`` finds them lazily (``iter_errors``), and
#: past this many the check stops (the report then says "at least"), so time and memory stay
#: bounded whatever the input (a 4 MiB array of wrong items is two million errors).
MAX_SCHEMA_ERRORS = 2000


#: A document kind's own wording for some schema errors: ``explain(err, path, file)`` returns the
#: problems ``err`` stands for, ``[]`` to drop it (an ``if``/``allOf`` wrapper whose inner errors
#: are reported), or ``None`` for the shared wording (:func:`schema_error_problems`).
Explain = Callable[[jsonschema.ValidationError, list, str], "Iterable[Problem] | None"]


def schema_problems(doc: Any, file: str, limit: int = MAX_PROBLEMS, *,
                    validator: jsonschema.protocols.Validator,
                    explain: Explain | None = None) -> list[Problem]:
    """Problems the JSON Schema finds, one per offending field, in document order, at most
    ``limit`` of them followed, when more were found, by one ``more-problems`` problem
    saying how many (:func:`bounded_schema_problems`). ``validator`` and ``explain``: the
    document kind's (its :func:`strict_validator` and its own wording, or None)."""
    out, more, stopped = bounded_schema_problems(doc, file, limit, validator=validator, explain=explain)
    return out + ([more_problems(file, more, stopped)] if more or stopped else [])


def bounded_schema_problems(doc: Any, file: str, limit: int = MAX_PROBLEMS, *,
                            validator: jsonschema.protocols.Validator,
                            explain: Explain | None = None) -> tuple[list[Problem], int, bool]:
    """``(problems, more, stopped)``: the schema's problems, streamed and bounded. The one
    schema checker of every strict document kind (recipes, extension.json, release image
    definitions, catalogue sources): ``validator`` is the kind's, ``explain`` its own wording
    (the recipe's is :func:`lemonpack.contract.loader.recipe_explain`).

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


def more_problems(file: str, more: int, stopped: bool = False) -> MoreProblems:
    """The last problem of a capped list: ``and N more problems`` (``at least`` when the
    schema check stopped before the end of the file, :data:`MAX_SCHEMA_ERRORS`)."""
    return MoreProblems.of(file, more, f"the check stopped after {MAX_SCHEMA_ERRORS} schema errors" if stopped else "")


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
        allowed = set(err.schema.get("properties", {})) if isinstance(err.schema, dict) else set()
        for key in err.instance:
            if key not in allowed:
                yield Problem(file, jsonpath.join(path + [key]), "unknown-field", f"unknown field {short_repr(key)}")
        return
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        yield Problem(file, jsonpath.join(path + [missing]) if path else missing, "missing-field",
                      f"required field {missing!r} is missing")
        return
    if err.validator == "propertyNames" or "propertyNames" in err.schema_path:
        key = err.instance
        target = path + [key] if isinstance(key, str) else path
        yield Problem(file, jsonpath.join(target), "invalid-key", f"invalid key {short_repr(key)}")
        return
    if (err.validator == "type" and err.validator_value == "integer" and isinstance(err.instance, float)
            and math.isfinite(err.instance) and err.instance.is_integer()):
        yield Problem(file, where, "integer",
                      f"{short_repr(err.instance)} is written with a fraction or an exponent; this field is an "
                      f"integer: write {int(err.instance)} (a JSON number written {short_repr(err.instance)} is a "
                      "float to most parsers)")
        return
    if err.validator == "uniqueItems":
        yield Problem(file, where, "duplicate-item", err.message)
        return
    if err.validator == "enum" and isinstance(err.validator_value, list):
        choices = ", ".join(str(v) for v in err.validator_value)
        yield Problem(file, where, "schema-enum", f"{short_repr(err.instance)} is not one of: {_short_text(choices)}")
        return
    yield Problem(file, where, f"schema-{err.validator}", _short_text(err.message))


def _short_text(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 10] + " ..."


__all__ = ["Explain", "DocumentOrder", "MAX_PROBLEMS", "MAX_SCHEMA_ERRORS", "MoreProblems", "bound",
           "bounded_schema_problems",
           "inline_local_refs", "more_problems", "schema_error_problems", "schema_problems", "strict_validator"]
