"""A JSON Schema (draft 2020-12) validator compiled for the recipe schema: every error, in
document order, in time linear in the document.

The reference implementation (``jsonschema``) re-resolves ``$ref`` and builds a child
validator for every array item and object member it descends into, which costs tens of
microseconds each: a 900 KB recipe with 50,000 capabilities took seconds. The recipe
schema uses a small set of keywords, so :func:`compile_schema` turns it once into nested
closures (``$ref`` resolved at compile time) that check a parsed document with one
function call per value. It refuses (``ValueError``) a schema using any other keyword, so
a schema change cannot be silently half-checked; ``jsonschema`` still checks the schema
itself against the 2020-12 metaschema (:mod:`lemonpack.contract.loader`) and is the
oracle of the differential test (``tests/contract/test_validator_fuzz.py``).

Semantics follow JSON Schema 2020-12 (Validation, sections 6.1-6.5; Core, section 10.3)
with the two rules lemonpack documents: ``pattern`` is ECMA-262 (``$`` is the end of
input, no final newline), and ``integer`` means a number *written* as an integer: a JSON
number with a fraction or an exponent (``1.0``, ``1e0``) is parsed as a float by most
parsers (Python, Go) and is not an integer here (keyword ``integer-literal``).
``uniqueItems`` uses JSON equality (``1 == 1.0``, ``true != 1``) through a hash: linear.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Path = tuple[str | int, ...]

#: Keywords that only annotate (no assertion).
_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "$comment", "title", "description", "default", "examples"})


@dataclass(slots=True)
class SchemaError:
    """One assertion that failed.

    ``keyword`` is the schema keyword (``type``, ``enum``, ``required`` ... or
    ``integer-literal``), ``path`` the instance location (keys and indices), ``instance``
    the failing value (for ``propertyNames``: the key), ``schema`` the (sub)schema holding
    the keyword, ``message`` a sentence, ``in_property_names`` true for an assertion on an
    object key, ``missing`` the absent property of a ``required`` error.
    """

    keyword: str
    path: Path
    instance: Any
    schema: dict
    message: str
    in_property_names: bool = False
    missing: str | None = None


Check = Callable[[Any, Path, list], None]


def short(value: Any, limit: int = 120) -> str:
    """``repr(value)`` cut to ``limit`` characters (bounded work for huge values)."""
    if isinstance(value, (list, dict)) and len(value) > limit:
        return f"<{'array' if isinstance(value, list) else 'object'} of {len(value)} items>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + " ...'"


def ecma_regex(pattern: str) -> str:
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


def equality_key(value: Any) -> Any:
    """A hashable key equal for JSON-equal values (1 == 1.0, true != 1, objects compare
    regardless of key order). Recursion is bounded by the document's nesting depth."""
    if isinstance(value, bool) or value is None:
        return ("c", value)
    if isinstance(value, (int, float)):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("l", tuple(equality_key(v) for v in value))
    if isinstance(value, dict):
        return ("o", frozenset((k, equality_key(v)) for k, v in value.items()))
    return ("?", id(value))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return _json_type(value) == name


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Compiler:
    def __init__(self, root: dict):
        self.root = root
        self.refs: dict[str, Check] = {}

    def ref(self, ref: str) -> Check:
        if ref in self.refs:
            return self.refs[ref]
        if not ref.startswith("#/"):
            raise ValueError(f"unsupported $ref {ref!r} (only local JSON pointers)")
        target: Any = self.root
        for part in ref[2:].split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        slot: list[Check] = []
        self.refs[ref] = lambda v, p, out: slot[0](v, p, out)  # a recursive $ref resolves late
        slot.append(self.compile(target))
        self.refs[ref] = slot[0]
        return slot[0]

    def compile(self, schema: Any) -> Check:  # noqa: C901 - one branch per keyword
        if schema is True or schema == {}:
            return lambda v, p, out: None
        if schema is False:
            return lambda v, p, out: out.append(SchemaError("false", p, v, {}, "no value is allowed here"))
        unknown = set(schema) - _ANNOTATIONS - _KEYWORDS
        if unknown:
            raise ValueError(f"schema keywords not supported by the recipe validator: {sorted(unknown)}")
        checks: list[Check] = []
        s = schema
        if "$ref" in s:
            checks.append(self.ref(s["$ref"]))
        if "type" in s:
            types = [s["type"]] if isinstance(s["type"], str) else list(s["type"])

            def check_type(v, p, out, types=types):
                if not any(_is_type(v, t) for t in types):
                    if "integer" in types and isinstance(v, float) and v.is_integer():
                        out.append(SchemaError("integer-literal", p, v, s, f"{short(v)} is written with a fraction "
                                               "or an exponent; write it as an integer (no '.', no 'e')"))
                    else:
                        out.append(SchemaError("type", p, v, s, f"{short(v)} is not of type "
                                               + ", ".join(repr(t) for t in types)))
            checks.append(check_type)
        if "enum" in s:
            allowed = s["enum"]
            keys = frozenset(equality_key(x) for x in allowed)

            def check_enum(v, p, out):
                if equality_key(v) not in keys:
                    out.append(SchemaError("enum", p, v, s, f"{short(v)} is not one of {allowed!r}"))
            checks.append(check_enum)
        if "const" in s:
            key = equality_key(s["const"])

            def check_const(v, p, out):
                if equality_key(v) != key:
                    out.append(SchemaError("const", p, v, s, f"{s['const']!r} was expected"))
            checks.append(check_const)
        if "pattern" in s:
            rx = re.compile(ecma_regex(s["pattern"]))

            def check_pattern(v, p, out):
                if isinstance(v, str) and not rx.search(v):
                    out.append(SchemaError("pattern", p, v, s, f"{short(v)} does not match {s['pattern']!r}"))
            checks.append(check_pattern)
        for kw, word in (("minLength", "short"), ("maxLength", "long")):
            if kw in s:
                def check_len(v, p, out, kw=kw, word=word, bound=s[kw]):
                    if isinstance(v, str) and (len(v) < bound if kw == "minLength" else len(v) > bound):
                        msg = "should be non-empty" if kw == "minLength" and bound == 1 else f"is too {word}"
                        out.append(SchemaError(kw, p, v, s, f"{short(v)} {msg}"))
                checks.append(check_len)
        for kw in ("minimum", "maximum"):
            if kw in s:
                def check_bound(v, p, out, kw=kw, bound=s[kw]):
                    if _number(v) and ((v < bound) if kw == "minimum" else (v > bound)):
                        word = "less than the minimum" if kw == "minimum" else "greater than the maximum"
                        out.append(SchemaError(kw, p, v, s, f"{short(v)} is {word} of {bound!r}"))
                checks.append(check_bound)
        if "minItems" in s:
            def check_min_items(v, p, out, bound=s["minItems"]):
                if isinstance(v, list) and len(v) < bound:
                    msg = "should be non-empty" if bound == 1 else "is too short"
                    out.append(SchemaError("minItems", p, v, s, f"{short(v)} {msg}"))
            checks.append(check_min_items)
        if s.get("uniqueItems") is True:
            def check_unique(v, p, out):
                if not isinstance(v, list):
                    return
                first: dict[Any, int] = {}
                for i, item in enumerate(v):
                    key = equality_key(item)
                    if key in first:
                        out.append(SchemaError("uniqueItems", p + (i,), item, s,
                                               f"{short(item)} repeats item [{first[key]}]; items must be unique"))
                    else:
                        first[key] = i
            checks.append(check_unique)
        if "items" in s:
            item_check = self.compile(s["items"])

            def check_items(v, p, out):
                if isinstance(v, list):
                    for i, item in enumerate(v):
                        item_check(item, p + (i,), out)
            checks.append(check_items)
        if "required" in s:
            required = list(s["required"])

            def check_required(v, p, out):
                if isinstance(v, dict):
                    for name in required:
                        if name not in v:
                            out.append(SchemaError("required", p, v, s, f"{name!r} is a required property",
                                                   missing=name))
            checks.append(check_required)
        if "minProperties" in s:
            def check_min_props(v, p, out, bound=s["minProperties"]):
                if isinstance(v, dict) and len(v) < bound:
                    msg = "should be non-empty" if bound == 1 else "does not have enough properties"
                    out.append(SchemaError("minProperties", p, v, s, f"{short(v)} {msg}"))
            checks.append(check_min_props)
        if "propertyNames" in s:
            name_check = self.compile(s["propertyNames"])

            def check_names(v, p, out):
                if isinstance(v, dict):
                    for key in v:
                        found: list[SchemaError] = []
                        name_check(key, p, found)
                        for e in found:
                            e.in_property_names = True
                            e.path = p
                        out.extend(found)
            checks.append(check_names)
        if "properties" in s or "additionalProperties" in s:
            props = {k: self.compile(v) for k, v in s.get("properties", {}).items()}
            extra = s.get("additionalProperties", True)
            extra_check = None if extra is False else self.compile(extra)

            def check_props(v, p, out):
                if not isinstance(v, dict):
                    return
                unknown = False
                for key, child in v.items():
                    check = props.get(key)
                    if check is not None:
                        check(child, p + (key,), out)
                    elif extra_check is not None:
                        extra_check(child, p + (key,), out)
                    else:
                        unknown = True
                if unknown:
                    out.append(SchemaError("additionalProperties", p, v, s,
                                           "additional properties are not allowed"))
            checks.append(check_props)
        if len(checks) == 1:
            return checks[0]

        def check_all(v, p, out):
            for c in checks:
                c(v, p, out)
        return check_all


_KEYWORDS = frozenset({"$ref", "type", "enum", "const", "pattern", "minLength", "maxLength", "minimum", "maximum",
                       "minItems", "uniqueItems", "items", "required", "minProperties", "propertyNames",
                       "properties", "additionalProperties"})


def compile_schema(schema: dict) -> Callable[[Any], list[SchemaError]]:
    """Compile ``schema`` (a draft 2020-12 schema using only the keywords above) into a
    function ``document -> [SchemaError]`` (empty: valid). Errors come in document order,
    an object's own errors before its members'. Raises ``ValueError`` for a keyword or
    ``$ref`` it does not implement."""
    check = _Compiler(schema).compile(schema)

    def validate(doc: Any) -> list[SchemaError]:
        out: list[SchemaError] = []
        check(doc, (), out)
        return out
    return validate
