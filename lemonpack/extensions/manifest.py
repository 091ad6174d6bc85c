"""Load an ``extension.json`` manifest (seed 002, sections 2, 3 and 8) into a frozen
:class:`Extension`.

Validation reports every problem of a file together, each naming the file, the JSON path
of the field and a rule id (:class:`~lemonpack.errors.Problem`), in three passes: (1) the
strict JSON reader of the recipe contract (:func:`lemonpack.strictjson.read_json_text`,
:func:`~lemonpack.strictjson.parse_json_strict`: UTF-8, duplicate keys, depth), (2) the
shipped JSON Schema ``schema/extension-v1.schema.json`` (Draft 2020-12, pinned in
``schema/lock.json`` by the recipe schema's lock mechanism,
:mod:`lemonpack.contract.schemalock` with ``stem="extension"``), with the recipe
validator's narrowings (ECMA-262 ``pattern`` anchoring, linear ``uniqueItems``, integers
written as integers), (3) the cross-field rules of :func:`semantic_problems`.

Loading reads only the manifest and ``stat``s the files it lists; it never compiles or
runs anything. Field by field documentation: ``docs/extension-json.md``.
"""

from __future__ import annotations

import functools
import os
import stat
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import fastjsonschema
import jsonschema

from lemonpack import jsonpath
from lemonpack.schemacheck import schema_problems as checked_schema_problems
from lemonpack.schemacheck import inline_local_refs, strict_validator
from lemonpack.strictjson import parse_json_strict, read_json_text
from lemonpack.contract.schemalock import check_lock, load_schema, refresh_lock
from lemonpack.errors import LemonpackError, LockError, ManifestError, Problem
from lemonpack.extensions.vocabulary import CAPABILITIES, COMMANDS, PLATFORMS, REQUIREMENTS
from lemonpack.safetree import inside

SCHEMA_DIR = Path(str(resources.files("lemonpack.extensions") / "schema"))
SCHEMA_LOCK = SCHEMA_DIR / "lock.json"
SCHEMA_STEM = "extension"
#: The manifest file name inside an extension directory.
MANIFEST_NAME = "extension.json"

#: Options the core reserves (seed 002 section 3: host settings, sampling, command
#: controls). An extension may not declare one; it may contribute values to the ones
#: listed in :data:`CONTRIBUTABLE` (``contributes_to``), whose core values are given here.
CORE_OPTIONS = ("--host", "--port", "--model", "--speculative", "--temperature", "--top-p", "--top-k",
                "--seed", "--max-tokens", "--ctx-size", "--threads", "--log-level", "--help", "--version")
CONTRIBUTABLE = {"--speculative": ("off",)}

#: C++ keywords and alternative tokens: not usable as an extension name (a namespace in
#: the constants header) or an entry symbol.
CXX_KEYWORDS = frozenset("""alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
char16_t char32_t class compl concept const consteval constexpr constinit const_cast continue co_await co_return
co_yield decltype default delete do double dynamic_cast else enum explicit export extern false float for friend goto
if inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public
register reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch
template this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while xor xor_eq gufo std main""".split())


@dataclass(frozen=True)
class Target:
    """A library the extension builds: ``name`` (C identifier) and ``requires``, the
    features (subset of :data:`REQUIREMENTS`) a build needs for it to be built."""

    name: str
    requires: tuple[str, ...]

    def missing(self, features: frozenset[str]) -> tuple[str, ...]:
        """Requirements not in ``features``, sorted (empty: the target is built)."""
        return tuple(sorted(r for r in self.requires if r not in features))


@dataclass(frozen=True)
class Provider:
    """One implementation of one capability (seed 002 section 2): ``id`` (``flash-next-q4``),
    ``capability``, artifact ``keys`` (``gguf:qwen4exp``), the ``target`` library holding its
    code, its C ``entry`` symbol and its optional declarative ``probe`` (the JSON object as
    written, evaluated by :mod:`lemonpack.extensions.probe`; None when the manifest has none:
    in Gufo the probe is code, in ``provider.cpp``, and the declarative one is lemonpack's
    optional extra for ``lemonpack probe``)."""

    id: str
    capability: str
    keys: tuple[str, ...]
    target: str
    entry: str
    probe: dict[str, Any] | None = field(default=None, hash=False, compare=True)


@dataclass(frozen=True)
class Option:
    """A command-line option the extension adds: ``name`` (``--mtp-model``), the
    ``commands`` that get it, ``type``, ``help``, accepted ``values`` (empty: any), and
    ``contributes_to``: the core option (``--speculative``) this entry adds ``values`` to
    instead of declaring a new option (then ``name == contributes_to``), else None."""

    name: str
    commands: tuple[str, ...]
    type: str
    help: str
    values: tuple[str, ...]
    contributes_to: str | None = None


@dataclass(frozen=True)
class Extension:
    """A validated manifest. ``path`` is the extension directory (absolute, resolved);
    ``official`` is set by the pipeline (named in the release lock and found in the tree's
    ``catalogue/extensions``), False from :func:`load_manifest`. ``api_version`` is the
    constraint as written (``>= 0.1.0``); ``files`` are relative to ``path``."""

    name: str
    version: str
    api_version: str
    entry: str
    providers: tuple[Provider, ...]
    options: tuple[Option, ...]
    targets: tuple[Target, ...]
    files: tuple[str, ...]
    dependencies: tuple[str, ...]
    path: Path
    official: bool = False
    description: str = ""

    @functools.cached_property
    def manifest(self) -> Path:
        """The ``extension.json`` file."""
        return self.path / MANIFEST_NAME

    def target(self, name: str) -> Target:
        """The target called ``name`` (KeyError if none; a loaded manifest always has it)."""
        for t in self.targets:
            if t.name == name:
                return t
        raise KeyError(name)

    def api_minimum(self) -> tuple[int, int]:
        """``(minor, revision)`` of the ``>= 0.MINOR.REVISION`` constraint."""
        text = self.api_version.replace(">=", "").strip()
        _, minor, revision = text.split(".")
        return int(minor), int(revision)


@lru_cache(maxsize=None)
def _validator() -> jsonschema.protocols.Validator:
    return strict_validator(load_schema(1, SCHEMA_DIR, SCHEMA_STEM), shipped=True)


#: Keywords the fast acceptor understands the same way as the strict validator (draft 2020-12
#: and draft 7 agree on them once local ``$ref``s are inlined); a schema using any other one
#: is validated by ``jsonschema`` alone.
_FAST_KEYWORDS = frozenset({"$schema", "$id", "$comment", "title", "description", "type", "enum", "const", "pattern",
                            "maxLength", "minLength", "minItems", "maxItems", "uniqueItems", "minimum", "maximum",
                            "required", "properties", "additionalProperties", "items", "propertyNames", "anyOf",
                            "$defs"})
_SUBSCHEMA = ("additionalProperties", "items", "propertyNames")


def _fast_keywords_only(schema: dict) -> bool:
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict) or not set(node) <= _FAST_KEYWORDS:
            return isinstance(node, bool)
        stack += list(node.get("properties", {}).values()) + list(node.get("$defs", {}).values())
        stack += [node[k] for k in _SUBSCHEMA if k in node] + list(node.get("anyOf", []))
    return True


@lru_cache(maxsize=None)
def _fast_acceptor():
    """``(predicate, distinct)``: a ``fastjsonschema`` predicate compiled from the inlined
    schema (several times faster than ``jsonschema`` on a valid manifest), or None when the
    schema uses a keyword outside :data:`_FAST_KEYWORDS`. It only *accepts*: a manifest it
    refuses is validated again by the strict validator for the exact problems, and a
    manifest holding a float is never given to it (draft 7 counts ``1.0`` as an integer;
    the strict validator does not). Its patterns are anchored like ECMA-262 (``$`` becomes
    ``\\Z``), as the strict validator's.

    ``uniqueItems`` of a top-level array of objects (``providers``, ``options``,
    ``targets``) is checked as ``distinct``: ``[(array, key)]`` where ``key`` is a required
    string property; distinct keys prove distinct items (equal keys go to the strict
    validator), without hashing whole objects."""
    schema = inline_local_refs(load_schema(1, SCHEMA_DIR, SCHEMA_STEM))
    schema = {k: v for k, v in schema.items() if k not in ("$schema", "$id", "$defs")}
    if not _fast_keywords_only(schema):
        return None
    properties = dict(schema.get("properties", {}))
    distinct = []
    for name, sub in properties.items():
        items = sub.get("items") if isinstance(sub, dict) else None
        if sub.get("uniqueItems") is True and isinstance(items, dict) and items.get("type") == "object":
            key = next((r for r in items.get("required", ())
                        if items.get("properties", {}).get(r, {}).get("type") == "string"), None)
            if key is not None:
                properties[name] = {k: v for k, v in sub.items() if k != "uniqueItems"}
                distinct.append((name, key))
    check = fastjsonschema.compile({**schema, "properties": properties,
                                    "$schema": "http://json-schema.org/draft-07/schema#"},
                                   use_default=False, use_formats=False)
    return check, tuple(distinct)


def _holds_float(doc: Any) -> bool:
    stack = [doc]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is dict:
            stack.extend(value.values())
        elif kind is list:
            stack.extend(value)
        elif kind is float:
            return True
    return False


def schema_problems(doc: Any, file: str) -> list[Problem]:
    """Problems the extension JSON Schema finds, in document order. A valid manifest is
    accepted by the compiled fast acceptor (:func:`_fast_acceptor`); everything else goes
    through the strict ``jsonschema`` validator, whose problems are returned, streamed and
    bounded like a recipe's (:func:`lemonpack.schemacheck.schema_problems`)."""
    fast = _fast_acceptor()
    if fast is not None and not _holds_float(doc):
        check, distinct = fast
        try:
            check(doc)
            if all(len({item[key] for item in doc.get(name, ())}) == len(doc.get(name, ())) for name, key in distinct):
                return []
        except fastjsonschema.JsonSchemaException:
            pass
    return checked_schema_problems(doc, file, validator=_validator())


def semantic_problems(doc: dict, file: str, directory: Path | None) -> list[Problem]:
    """Cross-field rules of a schema-valid manifest: target, provider id, option name and
    entry symbol unique; a provider's ``target`` declared; a contributing option names its
    core option and brings values; a new option is not a core one; ``choice`` options have
    values and only they do; no self-dependency; every ``files`` entry is a regular file
    inside ``directory`` (skipped when ``directory`` is None)."""
    out: list[Problem] = []

    def add(path: list, rule: str, message: str) -> None:
        out.append(Problem(file, jsonpath.join(path), rule, message))

    targets: dict[str, int] = {}
    for i, t in enumerate(doc.get("targets", [])):
        if t["name"] in targets:
            add(["targets", i, "name"], "duplicate-target", f"target {t['name']!r} is declared twice (targets[{targets[t['name']]}])")
        targets.setdefault(t["name"], i)
        if len(set(t["requires"]) & set(PLATFORMS)) > 1:
            add(["targets", i, "requires"], "platform-conflict",
                f"target {t['name']!r} requires two platforms; it could never be built")
    symbols: dict[str, str] = {doc["entry"]: "entry"}
    ids: dict[str, int] = {}
    for i, p in enumerate(doc.get("providers", [])):
        if p["id"] in ids:
            add(["providers", i, "id"], "duplicate-provider", f"provider id {p['id']!r} is declared twice (providers[{ids[p['id']]}])")
        ids.setdefault(p["id"], i)
        if p["target"] not in targets:
            known = ", ".join(targets) or "none"
            add(["providers", i, "target"], "unknown-target",
                f"provider {p['id']!r} names target {p['target']!r}, which 'targets' does not declare (declared: {known})")
        where = jsonpath.join(["providers", i, "entry"])
        if p["entry"] in symbols:
            add(["providers", i, "entry"], "duplicate-entry",
                f"entry symbol {p['entry']!r} is already used by {symbols[p['entry']]}")
        symbols.setdefault(p["entry"], where)
    names: dict[str, int] = {}
    for i, o in enumerate(doc.get("options", [])):
        name, values, contrib = o["name"], o.get("values", []), o.get("contributes_to")
        if name in names:
            add(["options", i, "name"], "duplicate-option", f"option {name!r} is declared twice (options[{names[name]}])")
        names.setdefault(name, i)
        if contrib is not None:
            if name != contrib:
                add(["options", i, "name"], "contributed-option",
                    f"an option contributing to core option {contrib!r} must be named {contrib!r}, not {name!r}")
            if not values:
                add(["options", i, "values"], "contributed-option",
                    f"an option contributing to core option {contrib!r} must list the values it adds")
            core = set(CONTRIBUTABLE.get(contrib, ()))
            for j, v in enumerate(values):
                if v in core:
                    add(["options", i, "values", j], "contributed-option",
                        f"value {v!r} of {contrib} belongs to the core")
        elif name in CORE_OPTIONS:
            add(["options", i, "name"], "core-option",
                f"option {name!r} is reserved by the core" + (
                    f"; add values to it with \"contributes_to\": \"{name}\"" if name in CONTRIBUTABLE else ""))
        if o["type"] == "choice" and not values:
            add(["options", i, "values"], "choice-values", f"option {name!r} has type 'choice' but no values")
        if o["type"] != "choice" and values:
            add(["options", i, "type"], "choice-values", f"option {name!r} lists values; its type must be 'choice'")
    for what, items in (("providers", [p["id"] for p in doc.get("providers", [])]),
                        ("options", [o["name"] for o in doc.get("options", [])])):
        mangled: dict[str, str] = {}
        for i, item in enumerate(items):
            m = item.lstrip("-").replace("-", "_").replace(".", "_")
            if m in mangled and mangled[m] != item:
                add([what, i], "constant-clash", f"{item!r} and {mangled[m]!r} give the same C++ constant name {m!r}")
            mangled.setdefault(m, item)
    for path, value in [(["name"], doc["name"]), (["entry"], doc["entry"])] + [
            (["providers", i, "entry"], p["entry"]) for i, p in enumerate(doc.get("providers", []))]:
        if value in CXX_KEYWORDS:
            add(path, "cxx-keyword", f"{value!r} is a C++ keyword; it cannot name a namespace or function")
    for i, dep in enumerate(doc.get("dependencies", [])):
        if dep == doc["name"]:
            add(["dependencies", i], "self-dependency", f"extension {dep!r} depends on itself")
    if directory is not None:
        root = None
        for i, rel in enumerate(doc.get("files", [])):
            try:  # the common case: a regular file right in the directory (no symlink to resolve)
                if "/" not in rel and stat.S_ISREG(os.lstat(os.path.join(directory, rel)).st_mode):
                    continue
            except OSError:
                pass
            root = root or os.path.realpath(directory)
            full = os.path.realpath(os.path.join(root, rel))
            if not inside(full, root):
                add(["files", i], "file-outside", f"file {rel!r} resolves outside the extension directory")
            elif not os.path.isfile(full):
                add(["files", i], "missing-file", f"file {rel!r} does not exist in {directory}")
    return out


def check_manifest(path: str | Path) -> tuple[Any, list[Problem]]:
    """Read and check the manifest at ``path`` (the ``extension.json`` file or its
    directory). Returns ``(document or None, problems)``; never raises for content."""
    path = Path(path)
    if path.name != MANIFEST_NAME and path.is_dir():
        path = path / MANIFEST_NAME
    file = str(path)
    text, problems = read_json_text(path)
    if text is None:
        return None, problems
    doc, problems = parse_json_strict(text, file)
    if any(p.rule == "json-syntax" for p in problems):
        return None, problems
    if not isinstance(doc, dict):
        return None, problems + [Problem(file, "", "document-type", "the manifest must be a JSON object")]
    problems = problems + schema_problems(doc, file)
    if problems:
        return doc, problems
    return doc, semantic_problems(doc, file, path.parent)


def build_extension(doc: dict, directory: Path, official: bool = False) -> Extension:
    """The frozen :class:`Extension` of a checked document (no validation here)."""
    return Extension(
        name=doc["name"], version=doc["version"], api_version=doc["api_version"], entry=doc["entry"],
        providers=tuple(Provider(p["id"], p["capability"], tuple(p["keys"]), p["target"], p["entry"], p.get("probe"))
                        for p in doc["providers"]),
        options=tuple(Option(o["name"], tuple(o["commands"]), o["type"], o["help"], tuple(o.get("values", ())),
                             o.get("contributes_to")) for o in doc.get("options", ())),
        targets=tuple(Target(t["name"], tuple(t["requires"])) for t in doc["targets"]),
        files=tuple(doc.get("files", ())), dependencies=tuple(doc.get("dependencies", ())),
        path=directory, official=official, description=doc.get("description", ""))


def load_manifest(path: str | Path) -> Extension:
    """Load and validate the manifest at ``path`` (``extension.json`` or its directory).

    Returns the :class:`Extension` (``path`` = the directory, absolute; ``official`` False).
    Raises :class:`~lemonpack.errors.ManifestError` carrying every problem, each naming the
    file and the JSON path (``providers[0].keys[1]``).
    """
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_NAME
    doc, problems = check_manifest(path)
    if problems:
        raise ManifestError(problems)
    return build_extension(doc, Path(os.path.abspath(path.parent)))


def check_schema_lock() -> list[str]:
    """Drift between the shipped extension schema and ``schema/lock.json`` (empty: OK)."""
    return [p.replace("scripts/locks.py recipe-schema", "scripts/locks.py extension-schema")
            for p in check_lock(SCHEMA_DIR, SCHEMA_LOCK, SCHEMA_STEM)]


def refresh_schema_lock(reason: str | None = None) -> dict[str, Any]:
    """Re-pin the extension schema (see :func:`lemonpack.contract.schemalock.refresh_lock`)."""
    try:
        return refresh_lock(SCHEMA_DIR, SCHEMA_LOCK, reason, SCHEMA_STEM)
    except LemonpackError as e:
        raise LockError(str(e).replace("contract major", "extension schema")) from None


__all__ = ["CAPABILITIES", "COMMANDS", "CONTRIBUTABLE", "CORE_OPTIONS", "Extension", "MANIFEST_NAME",
           "Option", "Provider", "REQUIREMENTS", "Target", "check_manifest", "load_manifest"]
