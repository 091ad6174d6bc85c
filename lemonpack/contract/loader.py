"""Load a recipe file into a frozen :class:`~lemonpack.contract.model.Recipe`.

Validation (RFC section 4, strict: reject rather than ignore) runs in three passes and
reports every problem of a file together, each naming the file, the JSON path of the
field and the rule: (1) JSON syntax and duplicate keys, (2) the shipped JSON Schema
(draft 2020-12, :mod:`lemonpack.contract.schemalock`), (3) the semantic rules of
:mod:`lemonpack.contract.rules`. Loading never touches the network or the hardware.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from lemonpack.contract import jsonpath
from lemonpack.contract.model import (ArchOverride, ExecFields, HealthProbe, PlatformBlock, Recipe, freeze)
from lemonpack.contract.rules import semantic_problems
from lemonpack.contract.schemalock import load_schema
from lemonpack.errors import ManifestError, Problem

_EXEC_FIELDS = tuple(f for f in ExecFields.__dataclass_fields__)


def canonical_json(doc: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, compact separators, UTF-8 (no ASCII escaping)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json_strict(text: str, file: str) -> tuple[Any, list[Problem]]:
    """Parse JSON text strictly: duplicate keys and ``NaN``/``Infinity`` are problems.

    Returns ``(document, problems)``; the document is None when the text is not JSON
    (then the one problem has rule ``json-syntax``). Used for every description file.
    """
    problems: list[Problem] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                problems.append(Problem(file, "", "duplicate-key", f"duplicate key {key!r} in one object"))
            seen[key] = value
        return seen

    try:
        return json.loads(text, object_pairs_hook=hook, parse_constant=_reject_constant), problems
    except json.JSONDecodeError as e:
        msg = f"{e.msg} (line {e.lineno}, column {e.colno})"
    except ValueError as e:
        msg = str(e)
    return None, [Problem(file, "", "json-syntax", f"not valid JSON: {msg}")]


@lru_cache(maxsize=None)
def _validator(major: int = 1) -> jsonschema.protocols.Validator:
    schema = load_schema(major)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def schema_problems(doc: Any, file: str) -> list[Problem]:
    """Problems the JSON Schema finds, one per offending field, in document order."""
    out: list[Problem] = []
    for err in sorted(_validator().iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path]):
        out.extend(_convert(err, file))
    return out


def _convert(err: jsonschema.ValidationError, file: str) -> Iterable[Problem]:
    path = list(err.absolute_path)
    where = jsonpath.join(path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = set(err.schema.get("properties", {}))
        for key in err.instance:
            if key not in allowed:
                yield Problem(file, jsonpath.join(path + [key]), "unknown-field", f"unknown field {key!r}")
        return
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        yield Problem(file, jsonpath.join(path + [missing]) if path else missing, "missing-field",
                      f"required field {missing!r} is missing")
        return
    if err.validator == "propertyNames" or "propertyNames" in err.schema_path:
        key = err.instance
        target = path + [key] if isinstance(key, str) else path
        yield Problem(file, jsonpath.join(target), _name_rule(path), _name_message(path, key))
        return
    if err.validator == "enum" and path and path[0] == "capabilities":
        yield Problem(file, where, "unknown-capability", f"unknown capability {err.instance!r}")
        return
    if err.validator == "pattern" and path == ["recipe"]:
        yield Problem(file, where, "recipe-id",
                      f"recipe id {err.instance!r} must match ^[a-z0-9][a-z0-9_-]{{1,63}}$")
        return
    if err.validator == "pattern" and path and path[-1] == "source":
        yield Problem(file, where, "source-https",
                      f"source {err.instance!r} must be an https:// URL (plain http is only for mirrors: --mirror)")
        return
    if err.validator == "pattern" and path and path[-1] == "sha256":
        yield Problem(file, where, "sha256-format", f"sha256 {err.instance!r} must be 'sha256:' and 64 lowercase hex digits")
        return
    yield Problem(file, where, f"schema-{err.validator}", err.message)


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
        return f"unknown capability {key!r}"
    if rule == "unknown-os":
        return f"unknown host OS {key!r} (linux, darwin, windows)"
    if rule == "unknown-accelerator":
        return f"unknown accelerator {key!r}"
    return f"invalid key {key!r}"


def check_document(doc: Any, file: str) -> list[Problem]:
    """All schema and semantic problems of a parsed document (empty list: valid)."""
    problems = schema_problems(doc, file)
    problems.extend(semantic_problems(doc, file))
    seen: set[tuple[str, str, str]] = set()
    unique = []
    for p in problems:
        if (p.path, p.rule, p.message) not in seen:
            seen.add((p.path, p.rule, p.message))
            unique.append(p)
    return unique


def check_text(text: str, file: str) -> tuple[Any, list[Problem]]:
    """Parse and check JSON text; returns ``(document or None, problems)``."""
    doc, problems = parse_json_strict(text, file)
    if doc is None:
        return None, problems
    return doc, problems + check_document(doc, file)


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
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError([Problem(file, "", "unreadable", f"cannot read file: {e}")]) from None
    return load_recipe_text(text, file)


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
        canonical=canonical_json(doc),
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
