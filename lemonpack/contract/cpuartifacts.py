"""Per-CPU artifacts of a recipe: the ``dev.lemonpack.cpu-artifacts`` key of its open
``extensions`` bag (RFC section 11 and decision D8: the additive surface inside contract
major 1; a new first-class field would need a new major).

Contract v1 has no CPU axis: a block's ``source``/``sha256`` is one artifact, and that
artifact is for whatever CPU its executables are built for (the builder reads their headers,
:mod:`lemonpack.exe_header`, and refuses any other target). A recipe that publishes one
artifact per CPU architecture says so here::

    "extensions": {"dev.lemonpack.cpu-artifacts": {
        "linux/cpu": {"amd64": {"source": "https://…/engine-x86_64.tar.gz", "sha256": "sha256:…"},
                      "arm64": {"source": "https://…/engine-aarch64.tar.gz", "sha256": "sha256:…"}},
        "linux/rocm/gfx1151": {"amd64": {"source": "…", "sha256": "sha256:…"}}}}

A key names a platform block (``<os>/<accelerator>``) or one of its arch overrides
(``<os>/<accelerator>/<arch pattern>``, the override's own key); each value maps OCI
architectures (:data:`lemonpack.exe_header.OCI_ARCHITECTURES`) to exactly a ``source``
(http or https URL) and a ``sha256`` (``sha256:`` and 64 hex digits). Merged the way arch
overrides are (section 4.6): the target's effective ``source``/``sha256`` (override > block >
top level) is replaced, for the CPU a build, install or Nix package is for, by the most
specific entry: the arch override's, else the block's. A block the key names offers those
CPUs and no other; a block it does not name offers its own artifact, for the CPU its
executables are for. Only a ``variant_of`` recipe may use it (only those have artifacts), and
its version policy is ``pinned``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from lemonpack.contract.model import Provenance, Recipe
from lemonpack.contract.select import EffectiveBlock
from lemonpack.digest import Digest
from lemonpack.errors import SelectionError
from lemonpack.exe_header import OCI_ARCHITECTURES

#: The key in a recipe's ``extensions`` bag.
KEY = "dev.lemonpack.cpu-artifacts"

Where = tuple[str | int, ...]


def check(doc: Mapping[str, Any]) -> Iterator[tuple[Where, str, str]]:
    """The problems of ``doc``'s key (a parsed recipe, read defensively), as ``(JSON path,
    rule, message)``: rule ``cpu-artifacts``. Strict: an unknown block, arch override, CPU or
    field, a source that is no http(s) URL, a sha256 that is no ``sha256:<hex>``, a recipe
    that is no ``variant_of``, or one whose policy is ``roll_forward``."""
    ext = doc.get("extensions")
    if not isinstance(ext, Mapping) or KEY not in ext:
        return
    value, here = ext[KEY], ("extensions", KEY)
    if not isinstance(value, Mapping) or not value:
        yield here, "cpu-artifacts", "must be an object of blocks (\"linux/cpu\": {\"amd64\": {source, sha256}})"
        return
    if not doc.get("variant_of"):
        yield here, "cpu-artifacts", "only a variant_of recipe has artifacts to give per CPU"
    platforms: Mapping[str, Any] = _mapping(doc.get("platforms"))
    for name, cpus in value.items():
        where = (*here, name)
        parts = name.split("/") if isinstance(name, str) else []
        block = _mapping(platforms.get(parts[0])).get(parts[1]) if len(parts) in (2, 3) else None
        if not isinstance(block, Mapping):
            have = [f"{o}/{a}" for o, accels in platforms.items() if isinstance(accels, Mapping) for a in accels]
            yield where, "cpu-artifacts", (f"names no platform block (a key is <os>/<accelerator>[/<arch pattern>]; "
                                           f"the blocks are: {', '.join(have) or 'none'})")
            continue
        if len(parts) == 3:
            overrides: Mapping[str, Any] = _mapping(block.get("arch"))
            if parts[2] not in overrides:
                yield where, "cpu-artifacts", (f"platforms.{parts[0]}.{parts[1]} has no arch override "
                                               f"{parts[2]!r} (it has: {', '.join(overrides) or 'none'})")
                continue
            policy = _mapping(overrides[parts[2]]).get("version_policy")
        else:
            policy = None
        policy = policy or block.get("version_policy") or doc.get("version_policy")
        if policy == "roll_forward":
            yield where, "cpu-artifacts", "per-CPU artifacts are pinned by sha256; the block's policy is roll_forward"
        if not isinstance(cpus, Mapping) or not cpus:
            yield where, "cpu-artifacts", "must map CPU architectures (amd64, arm64 ...) to {source, sha256}"
            continue
        for cpu, art in cpus.items():
            yield from _artifact((*where, cpu), cpu, art)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _artifact(where: Where, cpu: Any, art: Any) -> Iterator[tuple[Where, str, str]]:
    if cpu not in OCI_ARCHITECTURES:
        yield where, "cpu-artifacts", f"{cpu!r} is no OCI architecture (one of {', '.join(OCI_ARCHITECTURES)})"
        return
    if not isinstance(art, Mapping):
        yield where, "cpu-artifacts", "must be {\"source\": URL, \"sha256\": \"sha256:<hex>\"}"
        return
    for extra in sorted(set(art) - {"source", "sha256"}):
        yield (*where, extra), "cpu-artifacts", "unknown field (an entry holds source and sha256 only)"
    source = art.get("source")
    if not isinstance(source, str) or urlsplit(source).scheme not in ("http", "https") or not urlsplit(source).netloc:
        yield (*where, "source"), "cpu-artifacts", f"must be an http(s) URL, got {source!r}"
    sha = art.get("sha256")
    try:
        ok = Digest.parse(sha) is not None  # the prefixed form only, as the recipe's own sha256 fields
    except ValueError:
        ok = False
    if not ok:
        yield (*where, "sha256"), "cpu-artifacts", f"must be sha256:<64 hex digits>, got {sha!r}"


def _table(recipe: Recipe) -> Mapping[str, Mapping[str, Mapping[str, str]]]:
    value = recipe.extensions.get(KEY) if recipe.extensions else None
    return value if isinstance(value, Mapping) else {}


def _entry_key(recipe: Recipe, os_name: str, accelerator: str, arch_pattern: str | None) -> str | None:
    table = _table(recipe)
    if arch_pattern is not None and f"{os_name}/{accelerator}/{arch_pattern}" in table:
        return f"{os_name}/{accelerator}/{arch_pattern}"
    return f"{os_name}/{accelerator}" if f"{os_name}/{accelerator}" in table else None


def offered_cpus(recipe: Recipe, os_name: str, accelerator: str, arch_pattern: str | None = None) -> tuple[str, ...]:
    """The CPU architectures the key gives artifacts for, for this block (or arch override),
    sorted; ``()`` when the key does not name it (the block's own artifact is for the CPU its
    executables are built for)."""
    key = _entry_key(recipe, os_name, accelerator, arch_pattern)
    return tuple(sorted(_table(recipe)[key])) if key else ()


def for_cpu(eff: EffectiveBlock, cpu_arch: str) -> EffectiveBlock:
    """``eff`` with the artifact the key gives for ``cpu_arch`` (an OCI architecture) merged in:
    ``provenance`` replaced (its sha256 bare hex, as the loader keeps it; policy ``pinned``) and ``source_path`` the JSON path of the entry;
    ``eff`` itself when the key does not name its block. Raises :class:`SelectionError` naming
    the recipe, the block and the CPUs it offers when ``cpu_arch`` is not among them."""
    key = _entry_key(eff.recipe, eff.os, eff.accelerator, eff.arch_pattern)
    if key is None:
        return eff
    cpus = _table(eff.recipe)[key]
    if cpu_arch not in cpus:
        raise SelectionError(f"{eff.recipe.file}: extensions[\"{KEY}\"][\"{key}\"] offers {eff.path} for "
                             f"{', '.join(sorted(cpus))}, not for {cpu_arch}")
    art = cpus[cpu_arch]
    return replace(eff, provenance=Provenance(art["source"], Digest.parse(art["sha256"]).hex, "pinned"),
                   source_path=f"extensions[\"{KEY}\"][\"{key}\"].{cpu_arch}.source")


def cpu_unfit(cpus: Any, cpu_arch: str) -> str | None:
    """Why an index entry's platform whose ``cpu_archs`` are ``cpus`` (absent: None) does not
    fit a host of ``cpu_arch``; None when it fits or the entry does not say."""
    if isinstance(cpus, list) and cpus and cpu_arch not in cpus:
        return f"its artifacts are for {', '.join(map(str, cpus))}; the host's CPU is {cpu_arch}"
    return None


__all__ = ["KEY", "check", "cpu_unfit", "for_cpu", "offered_cpus"]
