"""Semantic rules of contract major 1 that the JSON Schema alone cannot say.

Each rule reads the raw document defensively (the schema may already have failed on
the same file, and every problem is reported together) and yields
:class:`~lemonpack.errors.Problem` objects with the JSON path of the offending field.
Sources: RFC sections 4 (the seven rejections), 4.1, 4.2, 4.3, 4.6, 5, 6, 7, 11, 12.
"""

from __future__ import annotations

import re
from typing import Any

from lemonpack import jsonpath
from lemonpack.contract.builtins import (BUILTIN_RECIPES, LAUNCH_PLAN_BUILTINS, SUPPORTED_CONTRACT_MAJOR,
                                         is_loader_env_key)
from lemonpack.contract.capabilities import CAPABILITIES
from lemonpack.contract.cpuartifacts import check as cpu_artifact_problems
from lemonpack.contract.tokens import TokenSyntaxError, parse_template
from lemonpack.errors import MAX_PROBLEMS, MoreProblems, Problem

Path = tuple[str | int, ...]

EXEC_TEMPLATE_LISTS = ("args", "stop_command_args", "argv_extra")
EXEC_TEMPLATE_STRINGS = ("command", "stop_command", "working_dir")
PROVENANCE_FIELDS = ("source", "sha256", "version_policy")
VARIANT_ONLY_FIELDS = ("binary", "argv_extra", "source", "sha256", "version_policy")


class _Collector:
    """The problems of one document: the first :data:`~lemonpack.errors.MAX_PROBLEMS` kept,
    the rest only counted (a 4 MiB recipe can hold half a million bad tokens)."""

    def __init__(self, file: str):
        self.file = file
        self.problems: list[Problem] = []
        self.more = 0

    def add(self, path: Path, rule: str, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem(self.file, jsonpath.join(path), rule, message))
        else:
            self.more += 1

    @property
    def full(self) -> bool:
        """True once further problems are only counted (their wording is not needed)."""
        return len(self.problems) >= MAX_PROBLEMS

    def report(self) -> list[Problem]:
        return self.problems + ([MoreProblems.of(self.file, self.more)] if self.more else [])


def semantic_problems(doc: Any, file: str) -> list[Problem]:
    """The semantic problems of ``doc`` (a parsed JSON value), in document order: at most
    :data:`~lemonpack.errors.MAX_PROBLEMS`, then one ``more-problems`` problem counting the
    rest (:func:`lemonpack.errors.bound` folds it into the file's report)."""
    c = _Collector(file)
    if not isinstance(doc, dict):
        return c.report()
    _identity(doc, c)
    _capabilities(doc, c)
    _top_level(doc, c)
    for path, rule, message in cpu_artifact_problems(doc):
        c.add(path, rule, message)
    for os_name, accels in _items(doc.get("platforms")):
        for accel, block in _items(accels):
            if isinstance(block, dict):
                _block(doc, block, ("platforms", os_name, accel), c)
    _provenance(doc, c)
    return c.report()


def _items(value: Any) -> list[tuple[str, Any]]:
    return list(value.items()) if isinstance(value, dict) else []


def _identity(doc: dict, c: _Collector) -> None:
    recipe = doc.get("recipe")
    if isinstance(recipe, str) and recipe in BUILTIN_RECIPES:
        c.add(("recipe",), "builtin-collision",
              f"recipe id {recipe!r} collides with a built-in recipe; choose another id")
    version = doc.get("api_contract_version")
    if isinstance(version, str) and _is_newer_major(version):
        c.add(("api_contract_version",), "contract-too-new",
              f"api_contract_version {version!r} is newer than this lemonpack supports "
              f"({SUPPORTED_CONTRACT_MAJOR}); upgrade lemonpack")
    if "extends" in doc and "variant_of" in doc:
        c.add(("extends",), "extends-and-variant-of", "declares both 'extends' and 'variant_of'; they are mutually exclusive")
    if isinstance(doc.get("extends"), str) and doc.get("extends") == recipe:
        c.add(("extends",), "extends-cycle", f"recipe {recipe!r} extends itself")
    variant = doc.get("variant_of")
    if isinstance(variant, str) and variant not in LAUNCH_PLAN_BUILTINS:
        c.add(("variant_of",), "variant-of-target",
              f"variant_of {variant!r} is not a built-in with a launch plan; "
              f"it must be one of {', '.join(LAUNCH_PLAN_BUILTINS)}")


_MAJOR = re.compile(r"[1-9][0-9]*")  # ASCII digits only: str.isdigit() also accepts '²'


def _is_newer_major(version: str) -> bool:
    """True when ``version`` is a well-formed major above the supported one (compared as
    digit strings, so a 5000-digit value costs no int conversion)."""
    if not _MAJOR.fullmatch(version):
        return False  # the schema's pattern reports it
    supported = str(SUPPORTED_CONTRACT_MAJOR)
    return (len(version), version) > (len(supported), supported)


def _capabilities(doc: dict, c: _Collector) -> None:
    caps = doc.get("capabilities")
    declared = [x for x in caps if isinstance(x, str) and x in CAPABILITIES] if isinstance(caps, list) else []
    for i, cap in enumerate(declared):
        info = CAPABILITIES.get(cap)
        if info and info.variant_of_only and "variant_of" not in doc:
            c.add(("capabilities", i), "variant-of-only-capability",
                  f"capability {cap!r} is only available to variant_of recipes in contract v1")
    for field in ("capability_enable_args", "endpoints"):
        for key, _ in _items(doc.get(field)):
            if key in CAPABILITIES and key not in declared:
                c.add((field, key), "undeclared-capability",
                      f"{field} key {key!r} is not a declared capability (declared: {', '.join(declared) or 'none'})")
    for key, args in _items(doc.get("capability_enable_args")):
        if isinstance(args, list):
            _template_list(args, (("capability_enable_args", key)), c, custom_args_ok=True)


def _top_level(doc: dict, c: _Collector) -> None:
    if "variant_of" not in doc:
        for field in PROVENANCE_FIELDS:
            if field in doc:
                c.add((field,), "provenance-without-variant-of",
                      f"'{field}' is only valid with 'variant_of' (a passthrough recipe runs a user-provided command)")
    probe = doc.get("health_probe")
    if isinstance(probe, dict) and probe.get("type") in ("tcp", "process"):
        for field in ("endpoint", "expected_status"):
            if field in probe:
                c.add(("health_probe", field), "probe-field",
                      f"health_probe.{field} only applies to type 'http' (this probe is {probe['type']!r})")
    uses_alias = _uses_token(doc, "arch_alias")
    if uses_alias and not isinstance(doc.get("arch_aliases"), dict):
        c.add(("arch_aliases",), "arch-alias-undeclared",
              "the {arch_alias} token is used but the recipe declares no arch_aliases")


def _uses_token(doc: dict, kind: str) -> bool:
    found = False

    def walk(value: Any) -> None:
        nonlocal found
        if isinstance(value, str) and "{" + kind in value:
            found = True
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(doc.get("platforms"))
    walk(doc.get("capability_enable_args"))
    return found


def _block(doc: dict, block: dict, path: Path, c: _Collector, *, base: dict | None = None) -> None:
    """Rules of a platform block, or of an arch override of ``base`` (an override names
    only its deltas, RFC 4.6: a field it omits is the base block's)."""
    override = base is not None
    variant = "variant_of" in doc
    has_cmd, has_args = "command" in block, "args" in block
    # the normative schema's exec_block: anyOf [required command+args, required binary]; the
    # RFC states no pairing of its own (4.2 lists what a block carries; 7: a variant_of block's
    # argv is the built-in's), so a block with 'binary' is not held to it: its 'command' is
    # reported by variant-of-command (or the 'binary' by variant-of-field) instead
    if has_cmd != has_args and not override and "binary" not in block:
        c.add(path + ("command" if has_cmd else "args",), "command-and-args",
              "'command' and 'args' must be set together (a block without 'binary' needs both: "
              "the v1 schema's exec_block)")
    if "stop_command_args" in block and "stop_command" not in block and "stop_command" not in (base or {}):
        c.add(path + ("stop_command_args",), "stop-command-args", "'stop_command_args' needs 'stop_command'")
    if variant:
        if has_cmd or has_args:
            c.add(path + ("command" if has_cmd else "args",), "variant-of-command",
                  "a variant_of block takes its argv from the built-in's launch plan; "
                  "use 'argv_extra' for extra flags instead of 'command'/'args'")
        if not override and "binary" not in block:
            c.add(path, "variant-of-binary", "a variant_of platform block needs 'binary' (the executable's file name)")
    else:
        for field in VARIANT_ONLY_FIELDS:
            if field in block:
                c.add(path + (field,), "variant-of-field", f"'{field}' is only valid with 'variant_of'")
        if not override and not has_cmd and not has_args:
            c.add(path, "command-and-args", "a passthrough platform block needs 'command' and 'args'")
    for key, _ in _items(block.get("env")):
        if is_loader_env_key(key):
            c.add(path + ("env", key), "loader-env",
                  f"env may not set the dynamic-loader variable {key!r}")
    for key, value in _items(block.get("env")):
        if isinstance(value, str):
            _template(value, path + ("env", key), c)
    for field in EXEC_TEMPLATE_STRINGS:
        value = block.get(field)
        if isinstance(value, str):
            _template(value, path + (field,), c)
            if field == "command" and value.startswith("-"):
                c.add(path + (field,), "command-dash", "command may not begin with '-'")
    for field in EXEC_TEMPLATE_LISTS:
        value = block.get(field)
        if isinstance(value, list):
            _template_list(value, path + (field,), c, custom_args_ok=field in ("args", "argv_extra"))
    if not override:
        for pattern, entry in _items(block.get("arch")):
            if isinstance(entry, dict):
                _block(doc, entry, path + ("arch", pattern), c, base=block)


def _template_list(values: list, path: Path, c: _Collector, *, custom_args_ok: bool) -> None:
    for i, value in enumerate(values):
        if isinstance(value, str):
            _template(value, path + (i,), c, whole_custom_args_ok=custom_args_ok)


def _template(value: str, path: Path, c: _Collector, *, whole_custom_args_ok: bool = False) -> None:
    try:
        parts = parse_template(value, suggest=not c.full)
    except TokenSyntaxError as e:
        c.add(path, "token", str(e))
        return
    pid_ok = any(p in ("stop_command", "stop_command_args") for p in path)
    for part in parts:
        if not isinstance(part, str) and part.kind == "pid" and not pid_ok:
            c.add(path, "token-pid", "{pid} is only known after spawn: use it in stop_command or stop_command_args")
        if not isinstance(part, str) and part.kind == "custom_args":
            if not (whole_custom_args_ok and value == "{custom_args}"):
                c.add(path, "token-custom-args",
                      "{custom_args} expands to several argv elements: it must be a whole element of "
                      "args or argv_extra")


def _provenance(doc: dict, c: _Collector) -> None:
    """Pinned (the default) requires sha256 at whatever level ends up fetching (section 7).

    A hash pins one file: it must sit at the level of the ``source`` it pins or at a more
    specific one. A ``source`` override that would inherit the hash of a less specific
    level (a different file) is refused rather than silently verified against it.
    """
    if "variant_of" not in doc:
        return
    top = {k: (doc[k], 0) for k in PROVENANCE_FIELDS if k in doc}
    user_binary = "source" not in doc and not any(
        isinstance(block, dict) and ("source" in block or any(
            isinstance(e, dict) and "source" in e for _, e in _items(block.get("arch"))))
        for _, accels in _items(doc.get("platforms")) for _, block in _items(accels))
    for os_name, accels in _items(doc.get("platforms")):
        for accel, block in _items(accels):
            if not isinstance(block, dict):
                continue
            path: Path = ("platforms", os_name, accel)
            base = {**top, **{k: (block[k], 1) for k in PROVENANCE_FIELDS if k in block}}
            _check_effective(base, path, c, user_binary)
            for pattern, entry in _items(block.get("arch")):
                if isinstance(entry, dict) and ("source" in base or any(k in entry for k in PROVENANCE_FIELDS)):
                    eff = {**base, **{k: (entry[k], 2) for k in PROVENANCE_FIELDS if k in entry}}
                    _check_effective(eff, path + ("arch", pattern), c, user_binary)
                    _check_conflict(base, entry, path + ("arch", pattern), c)


def _check_conflict(base: dict, entry: dict, path: Path, c: _Collector) -> None:
    """An override that changes only ``sha256`` re-pins the inherited source; if that
    source is already pinned to another hash at its own level, one of the two is wrong."""
    if "sha256" not in entry or "source" in entry or "source" not in base or "sha256" not in base:
        return
    (source, source_level), (sha, sha_level) = base["source"], base["sha256"]
    if sha_level >= source_level and sha != entry["sha256"]:
        c.add(path + ("sha256",), "sha256-conflict",
              f"sha256 differs from {sha}, which already pins the inherited source {source}; "
              "one file cannot have two hashes: give this override its own source")


def _check_effective(eff: dict, path: Path, c: _Collector, user_binary: bool = False) -> None:
    """``eff`` maps a provenance field to ``(value, level)``: 0 top, 1 block, 2 override.

    ``user_binary``: the recipe names no source anywhere, so the binary is the user's
    (section 7); pinned still requires a sha256 then (section 7 "pinned requires sha256",
    and the normative schema requires one for every pinned variant_of). A block without
    a source whose arch overrides have one is not that case (section 4.6).
    """
    policy = eff.get("version_policy", ("pinned", 0))[0]
    if policy != "pinned":
        return
    if "source" not in eff:
        if user_binary and "sha256" not in eff:
            c.add(path, "pinned-needs-sha256",
                  "this variant_of binary is pinned (the default version_policy) but has no sha256 "
                  "at this level or above; add sha256 or set version_policy to roll_forward")
        return
    source, source_level = eff["source"]
    if "sha256" not in eff:
        c.add(path, "pinned-needs-sha256",
              f"artifact {source} is pinned (the default version_policy) but has no sha256 "
              "at this level or above; add sha256 or set version_policy to roll_forward")
    elif eff["sha256"][1] < source_level:
        c.add(path, "sha256-level",
              f"source {source} is set here but its sha256 would be inherited from a less specific "
              "level, where it pins a different file; set sha256 next to this source")
