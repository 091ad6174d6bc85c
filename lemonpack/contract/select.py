"""Platform selection and arch overrides (RFC sections 4.6 and 9), as pure functions.

Given a :class:`~lemonpack.contract.model.Recipe` and an explicit
:class:`~lemonpack.contract.host.HostFacts` (never the real machine), choose the
platform block, then the arch override, and merge them into an :class:`EffectiveBlock`:
the one shape both the builder (artifact to fetch) and the runtime (argv to launch) use,
so the artifact installed and the argv launched cannot disagree.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from lemonpack.contract.host import DETECTION_ORDER, HostFacts
from lemonpack.contract.model import ArchOverride, PlatformBlock, Provenance, Recipe
from lemonpack.errors import SelectionError

_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class EffectiveBlock:
    """A platform block with its arch override merged in (section 4.6).

    ``gpu_arch`` is the concrete host arch (runtime) or the override's pattern (build
    targets); ``arch_pattern`` the override key that matched, None for the base block;
    ``path`` the JSON path of the most specific level (``platforms.linux.rocm.arch.gfx1151``);
    ``reserved_args`` the block's list united with the top-level list, block first;
    ``provenance`` the effective source/sha256/policy (override > block > top level).
    """

    recipe: Recipe
    os: str
    accelerator: str
    gpu_arch: str | None
    arch_pattern: str | None
    path: str
    command: str | None
    args: tuple[str, ...]
    stop_command: str | None
    stop_command_args: tuple[str, ...]
    working_dir: str | None
    env: Mapping[str, str]
    binary: str | None
    argv_extra: tuple[str, ...]
    reserved_args: tuple[str, ...]
    provenance: Provenance
    #: The JSON path of ``provenance.source`` when it comes from the per-CPU artifacts of the
    #: ``extensions`` bag (:func:`lemonpack.contract.cpuartifacts.for_cpu`), else None.
    source_path: str | None = None

    @property
    def target_name(self) -> str:
        """A stable tag-safe name: ``linux-rocm``, ``linux-rocm-gfx1151``, ``linux-rocm-gfx115x``
        (glob characters ``*``/``?`` become ``x``, anything else unsafe becomes ``_``)."""
        parts = [self.os, self.accelerator]
        if self.gpu_arch:
            parts.append(re.sub(r"[^A-Za-z0-9_.-]", "_", self.gpu_arch.replace("*", "x").replace("?", "x")))
        return "-".join(parts)


def is_glob(pattern: str) -> bool:
    """True when ``pattern`` uses glob syntax (``*``, ``?``, ``[``)."""
    return bool(_GLOB_CHARS & set(pattern))


def match_pattern(patterns: Sequence[str], arch: str) -> str | None:
    """The key that applies to ``arch``: an exact key wins, otherwise the first glob
    (declaration order) that matches; None when nothing matches (section 4.6)."""
    if arch in patterns:
        return arch
    for pattern in patterns:
        if is_glob(pattern) and fnmatch.fnmatchcase(arch, pattern):
            return pattern
    return None


def arch_alias(recipe: Recipe, arch: str | None) -> str:
    """Resolve ``{arch_alias}`` for ``arch`` through ``arch_aliases`` (exact, then first
    glob). Raises :class:`SelectionError` when the arch is unknown or unmapped: the
    token fails loudly rather than becoming an empty string."""
    if not arch:
        raise SelectionError(f"{recipe.file}: {{arch_alias}} needs a GPU arch, and the host has none")
    aliases = dict(recipe.arch_aliases)
    key = match_pattern(list(aliases), arch)
    if key is None:
        raise SelectionError(f"{recipe.file}: arch_aliases has no entry for arch {arch!r} "
                             f"(mapped: {', '.join(aliases) or 'none'})")
    return aliases[key]


def select_accelerator(recipe: Recipe, host: HostFacts, requested: str | None = None) -> str:
    """Choose the accelerator key for ``host.os`` in section 9's order: the requested
    device if the recipe has that block, ``default_accelerator`` if its block exists,
    runtime detection (metal on macOS, then cuda, rocm, vulkan, gpu, cpu among what the
    host has), and last the first key declared. Raises :class:`SelectionError` when the
    recipe has no block for the host OS."""
    blocks = recipe.platforms.get(host.os)
    if not blocks:
        raise SelectionError(f"{recipe.file}: recipe {recipe.recipe!r} has no platform block for OS "
                             f"{host.os!r} (it declares: {', '.join(recipe.platforms) or 'none'})")
    if requested and requested in blocks:
        return requested
    if recipe.default_accelerator and recipe.default_accelerator in blocks:
        return recipe.default_accelerator
    order = (("metal",) if host.os == "darwin" else ()) + DETECTION_ORDER
    for accel in order:
        if accel in blocks and accel in host.accelerators:
            return accel
    return next(iter(blocks))


def lacking_accelerator_warning(recipe: Recipe, host: HostFacts, accelerator: str, *,
                                requested: str | None = None, requested_by: str = "--device") -> str | None:
    """A one-line warning when the block chosen for ``host`` is for an ``accelerator`` the
    host does not have (section 9 still picks it: a requested device, the recipe's
    ``default_accelerator``, or, when no block matches the host, the first declared one);
    None when the host has it. ``requested`` is the device asked for and ``requested_by``
    how it was asked (an option name). Names the block, the reason and the host's
    accelerators. Raises nothing."""
    if accelerator in host.accelerators:
        return None
    if requested == accelerator:
        why = f"it was requested ({requested_by} {accelerator})"
    elif recipe.default_accelerator == accelerator:
        why = "it is the recipe's default_accelerator"
    else:
        blocks = ", ".join(recipe.platforms.get(host.os, {}))
        why = f"no block of the recipe ({blocks}) is for an accelerator this host has"
    return (f"using block platforms.{host.os}.{accelerator} although this host has no {accelerator} "
            f"(host accelerators: {', '.join(sorted(host.accelerators))}): {why}")


def merge(recipe: Recipe, block: PlatformBlock, override: ArchOverride | None, gpu_arch: str | None) -> EffectiveBlock:
    """Field-wise merge of ``override`` onto ``block`` (a present field replaces the
    base field; ``env`` merges key by key) plus the top-level provenance defaults."""
    def pick(name: str):
        value = getattr(override, name) if override is not None else None
        return value if value is not None else getattr(block, name)

    env = dict(block.env or {})
    if override is not None and override.env:
        env.update(override.env)
    own_reserved = tuple(pick("reserved_args") or ())
    reserved = own_reserved + tuple(a for a in recipe.reserved_args if a not in own_reserved)
    source = pick("source") if pick("source") is not None else recipe.source
    sha = pick("sha256") if pick("sha256") is not None else recipe.sha256
    policy = pick("version_policy") or recipe.version_policy or "pinned"
    path = block.path + (f".arch.{override.pattern}" if override is not None else "")
    return EffectiveBlock(
        recipe=recipe, os=block.os, accelerator=block.accelerator, gpu_arch=gpu_arch,
        arch_pattern=override.pattern if override is not None else None, path=path,
        command=pick("command"), args=tuple(pick("args") or ()), stop_command=pick("stop_command"),
        stop_command_args=tuple(pick("stop_command_args") or ()), working_dir=pick("working_dir"),
        env=MappingProxyType(env), binary=pick("binary"), argv_extra=tuple(pick("argv_extra") or ()),
        reserved_args=reserved, provenance=Provenance(source, sha, policy),
    )


def block_for_arch(recipe: Recipe, block: PlatformBlock, arch: str | None) -> EffectiveBlock:
    """Merge the override of ``block`` that applies to the concrete ``arch`` (if any)."""
    override = None
    if arch and block.arch:
        key = match_pattern([o.pattern for o in block.arch], arch)
        override = next((o for o in block.arch if o.pattern == key), None)
    return merge(recipe, block, override, arch)


def select_block(recipe: Recipe, host: HostFacts, device: str | None = None) -> EffectiveBlock:
    """The effective block a load on ``host`` uses: OS, then accelerator
    (:func:`select_accelerator`), then the arch override for the host's GPU arch."""
    accel = select_accelerator(recipe, host, device)
    block = recipe.platforms[host.os][accel]
    return block_for_arch(recipe, block, host.gpu_arch(accel))


def targets(recipe: Recipe, *, os: str | None = None, accelerator: str | None = None,
            arch: str | None = None) -> list[EffectiveBlock]:
    """Build targets: by default every platform block and every arch override the recipe
    declares (an override's ``gpu_arch`` is its pattern). ``os``/``accelerator`` narrow
    the blocks; ``arch`` selects, per block, the override that applies to that concrete
    arch (named after ``arch``), or the base block when none does. Raises :class:`SelectionError` when the
    narrowing leaves nothing, naming what the recipe offers."""
    out: list[EffectiveBlock] = []
    for os_name, blocks in recipe.platforms.items():
        if os and os_name != os:
            continue
        for accel, block in blocks.items():
            if accelerator and accel != accelerator:
                continue
            if arch:
                eff = block_for_arch(recipe, block, arch)
                out.append(eff if eff.arch_pattern else merge(recipe, block, None, None))
                continue
            out.append(merge(recipe, block, None, None))
            out.extend(merge(recipe, block, o, o.pattern) for o in block.arch)
    if not out:
        offered = ", ".join(f"{o}/{a}" for o, bs in recipe.platforms.items() for a in bs)
        raise SelectionError(f"{recipe.file}: no platform block matches os={os or '*'} "
                             f"accelerator={accelerator or '*'} (the recipe offers: {offered})")
    names = [t.target_name for t in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SelectionError(f"{recipe.file}: arch patterns give clashing target names: {', '.join(dupes)}")
    return out
