"""Load a recipe file into a frozen :class:`~lemonpack.contract.model.Recipe`.

Validation (RFC section 4, strict: reject rather than ignore) runs in three passes and
reports every problem of a file together, each naming the file, the JSON path of the
field and the rule: (1) reading and JSON syntax (:mod:`lemonpack.strictjson`: size, UTF-8,
nesting depth, duplicate keys, lone surrogates, numbers out of range), (2) the shipped JSON
Schema (draft 2020-12, :mod:`lemonpack.contract.schemalock`) through the shared schema check
(:mod:`lemonpack.schemacheck`: ``pattern`` anchored as ECMA-262 anchors it, a linear
``uniqueItems``, integers written without a fraction or exponent) with the recipe's own
wording (:func:`recipe_explain`), (3) the semantic rules of :mod:`lemonpack.contract.rules`.

Any input gets an answer (problems, or a model) in time and memory linear in its size:
nothing here raises for a file's content, and recursion is bounded by
:data:`lemonpack.strictjson.MAX_DEPTH`. Loading never touches the network or the hardware.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import lru_cache
from itertools import chain
from pathlib import Path
from typing import Any

import jsonschema

from lemonpack import jsonpath
from lemonpack.canonical import canonical_json
from lemonpack.contract.model import (RECIPE_ID_PATTERN, ArchOverride, ExecFields, HealthProbe, PlatformBlock, Recipe,
                                      freeze)
from lemonpack.contract.rules import semantic_problems
from lemonpack.contract.schemalock import load_schema
from lemonpack.digest import Digest
from lemonpack.errors import ManifestError, Problem, bound
from lemonpack.schemacheck import MAX_PROBLEMS, bounded_schema_problems, more_problems, strict_validator
from lemonpack.strictjson import parse_json_strict, read_json_text, short_repr

_EXEC_FIELDS = tuple(f for f in ExecFields.__dataclass_fields__)


@lru_cache(maxsize=None)
def _validator(major: int = 1) -> jsonschema.protocols.Validator:
    """The ``jsonschema`` validator of contract ``major``'s schema (draft 2020-12, checked
    against its metaschema by the tests, not at run time), with three documented narrowings: ECMA-262 ``pattern``
    anchoring, a linear ``uniqueItems``, and integers written as integers."""
    return strict_validator(load_schema(major), shipped=True)



def recipe_explain(err: jsonschema.ValidationError, path: list, file: str) -> list[Problem] | None:
    """The recipe contract's own wording for schema errors (see :data:`~lemonpack.schemacheck.Explain`): unknown
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
                           f"{short_repr(err.instance)} is written with a fraction or an exponent; this field is an "
                           f"integer: write 1 (a JSON number written {short_repr(err.instance)} is a float to most "
                           "parsers) (RFC 4.3: requested_ports is the integer 1)"))
    elif err.validator == "enum" and path and path[0] == "capabilities":
        out.append(Problem(file, where, "unknown-capability", f"unknown capability {short_repr(err.instance)}"))
    elif path == ["requested_ports"] and err.validator in ("minimum", "maximum"):
        out.append(Problem(file, where, "requested-ports",
                           f"requested_ports is {short_repr(err.instance)}; contract v1 supports exactly 1 (RFC 4.3: "
                           "the {port} token)"))
    elif err.validator == "pattern" and path and path[-1] == "binary":
        out.append(Problem(file, where, "binary-name",
                           f"binary {short_repr(err.instance)} must be a bare file name: a letter or digit, then "
                           "letters, digits, '.', '_' or '-' (no path separator, no leading '-' or '.')"))
    elif err.validator == "pattern" and path == ["recipe"]:
        out.append(Problem(file, where, "recipe-id",
                           f"recipe id {short_repr(err.instance)} must match {RECIPE_ID_PATTERN}"))
    elif err.validator == "pattern" and path and path[-1] == "source":
        out.append(Problem(file, where, "source-https", f"source {short_repr(err.instance)} must be an https:// URL "
                           "(plain http is only for mirrors: --mirror)"))
    elif err.validator == "pattern" and path and path[-1] == "sha256":
        out.append(Problem(file, where, "sha256-format",
                           f"sha256 {short_repr(err.instance)} must be 'sha256:' and 64 lowercase hex digits"))
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
        return f"unknown capability {short_repr(key)}"
    if rule == "unknown-os":
        return f"unknown host OS {short_repr(key)} (linux, darwin, windows)"
    if rule == "unknown-accelerator":
        return f"unknown accelerator {short_repr(key)}"
    return f"invalid key {short_repr(key)}"


def check_document(doc: Any, file: str) -> list[Problem]:
    """All schema and semantic problems of a parsed document (empty list: valid)."""
    if not isinstance(doc, dict):
        kind = "null" if doc is None else type(doc).__name__.replace("dict", "object").replace("list", "array")
        return [Problem(file, "", "document-type", f"the document must be a JSON object, not {kind}")]
    problems, more, stopped = bounded_schema_problems(doc, file, validator=_validator(), explain=recipe_explain)
    if more or stopped:
        problems.append(more_problems(file, more, stopped))
    seen: set[tuple[str, str, str]] = set()  # what the report keeps (at most MAX_PROBLEMS)

    def unique(parts: Iterable[Problem]) -> Iterator[Problem]:
        for p in parts:
            key = (p.path, p.rule, p.message)
            if key not in seen:
                if len(seen) < MAX_PROBLEMS:
                    seen.add(key)
                yield p

    # the semantic rules' problems come after the schema's; the report is bounded as a whole
    return bound(chain(unique(problems), unique(semantic_problems(doc, file))), file)


def check_text(text: str, file: str) -> tuple[Any, list[Problem]]:
    """Parse and check JSON text; returns ``(document or None, problems)``. Never raises."""
    doc, problems = parse_json_strict(text, file)
    if any(p.rule == "json-syntax" for p in problems):
        return None, problems
    return doc, bound(chain(problems, check_document(doc, file)), file)


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
    """The hex of a recipe's ``sha256`` field (``sha256:<hex>``, the schema's form)."""
    return Digest.parse(sha, bare=True).hex if sha else None


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

