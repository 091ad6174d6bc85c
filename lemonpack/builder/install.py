"""Install a variant_of recipe's artifact where the runtime launches it (RFC sections 7, 10).

The host OS block is chosen; when the recipe offers more than one artifact for that OS
and the host cannot tell which, ``--accelerator`` is required and the choices are named
(section 7: never guess). The effective arch override uses ``--arch`` or the detected GPU
arch. The artifact is fetched and verified (unless ``roll_forward``) and unpacked safely
into ``<cache>/external/<recipe>/``, replacing a previous install atomically. The work
happens in a locked ``<cache>/external/.<recipe>.install-*`` directory; one left by a
killed install is removed by the next install of that recipe or ``lemonpack cache clean``.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from lemonpack.contract import EffectiveBlock, HostFacts, Recipe
from lemonpack.contract.cpuartifacts import for_cpu
from lemonpack.contract.select import block_for_arch
from lemonpack.digest import sha256_text
from lemonpack.errors import BuildError, NotFoundError, SelectionError, StorageError
from lemonpack.builder.artifact import fetch_target, unpack_target
from lemonpack.fetch import ArtifactCache, Mirror
from lemonpack.fetch.staging import LockedDir, ensure_dir, remove_tree, sweep
from lemonpack.files import replace_directory, replace_file
from lemonpack.paths import external_dir, install_record

log = logging.getLogger(__name__)

DISCLOSURE = ("WARNING: this backend runs as an external subprocess. No process\n"
              "         sandbox is enforced; run only manifests you trust.")


@dataclass(frozen=True)
class InstallPlan:
    """What :func:`install_recipe` will do: the ``recipe``, the chosen effective ``block``;
    the ``mirror`` to fetch from (None: the origin); ``example``: the shipped example, whose
    artifact is served from the installed package; ``warnings``: for the user (a block for
    an accelerator the host lacks); ``cpu_arch``: the host's CPU (OCI name) every executable
    of the artifact must be built for."""

    recipe: Recipe
    block: EffectiveBlock
    cpu_arch: str
    mirror: Mirror | None = None
    example: bool = False
    warnings: tuple[str, ...] = ()

    def disclosure(self) -> list[str]:
        """Provenance lines and the no-sandbox warning printed before installing (section 10)."""
        r, p = self.recipe, self.block.provenance
        rows = [("recipe", f"{r.recipe} ({r.display_name})"), ("variant_of", r.variant_of or "-"),
                ("platform", self.block.path), ("source", p.source or "- (user-provided binary)"),
                ("sha256", sha256_text(p.sha256) if p.sha256 else "-"), ("version_policy", p.policy),
                ("capabilities", ", ".join(r.capabilities))]
        return [f"{k + ':':<16}{v}" for k, v in rows] + [DISCLOSURE]


def plan_install(recipe: Recipe, host: HostFacts, *, accelerator: str | None = None,
                 arch: str | None = None) -> InstallPlan:
    """Choose the block and arch override to install for ``host``.

    Raises :class:`SelectionError` when the recipe has no block for the host OS, when the
    requested accelerator has no block, when several artifacts fit and no
    ``accelerator`` was given (naming them), or when only arch overrides carry artifacts
    and the arch is unknown (naming the patterns), or when the block's per-CPU artifacts
    (:func:`lemonpack.contract.cpuartifacts.for_cpu`) have none for the host's CPU. Raises BuildError for a
    passthrough recipe (nothing to install: its binary is user-provided).
    """
    if recipe.variant_of is None:
        raise BuildError(f"{recipe.file}: {recipe.recipe} is a passthrough recipe; its command is "
                         "user-provided and there is nothing to install")
    blocks = recipe.platforms.get(host.os)
    if not blocks:
        raise SelectionError(f"{recipe.file}: no platform block for OS {host.os!r} "
                             f"(declared: {', '.join(recipe.platforms)})")
    if accelerator:
        if accelerator not in blocks:
            raise SelectionError(f"{recipe.file}: no block platforms.{host.os}.{accelerator} "
                                 f"(choices: {', '.join(blocks)})")
        chosen = accelerator
    else:
        usable = [a for a in blocks if a in host.accelerators] or list(blocks)
        if len(usable) > 1:
            raise SelectionError(f"{recipe.file}: {recipe.recipe} offers more than one artifact for "
                                 f"{host.os} ({', '.join(usable)}); choose one with --accelerator")
        chosen = usable[0]
    block = recipe.platforms[host.os][chosen]
    gpu_arch = arch or host.gpu_arch(chosen)
    eff = for_cpu(block_for_arch(recipe, block, gpu_arch), host.cpu)
    if eff.provenance.source is None and any(o.source for o in block.arch):
        raise SelectionError(f"{recipe.file}: {block.path} publishes artifacts per arch "
                             f"({', '.join(o.pattern for o in block.arch)}); give --arch")
    return InstallPlan(recipe, eff, host.cpu)


def prepare_install(recipe: Recipe, host: HostFacts, *, accelerator: str | None = None, arch: str | None = None,
                    mirror: str | Mirror | None = None, allow_insecure_mirror: bool = False,
                    example: bool = False) -> InstallPlan:
    """``lemonpack install``'s plan: :func:`plan_install` plus the mirror (``mirror`` else
    ``$LEMONPACK_MIRROR``; none for the ``example``, whose mirror is served when installing, though
    ``$LEMONPACK_MIRROR`` is still checked)
    and the lacking-accelerator warning. Raises :class:`~lemonpack.errors.UsageError`
    (exit 2) for an ``accelerator`` that is no accelerator name, a mirror that is no http(s)
    URL, or ``example`` with a ``mirror``; what :func:`plan_install` raises."""
    from lemonpack.contract.builtins import ACCELERATORS
    from lemonpack.contract.select import lacking_accelerator_warning
    from lemonpack.errors import UsageError

    if example and mirror:
        raise UsageError("--example installs the shipped example alone, from its own loopback mirror",
                         param="--example")
    if accelerator is not None and accelerator not in ACCELERATORS:
        raise UsageError(f"{accelerator!r} is not one of {', '.join(ACCELERATORS)}", param="--accelerator")
    # checked for the example too (a bad $LEMONPACK_MIRROR is exit 2 from every command), then not used
    checked = mirror if isinstance(mirror, Mirror) else Mirror.from_env(mirror, allow_insecure=allow_insecure_mirror)
    resolved = None if example else checked
    plan = plan_install(recipe, host, accelerator=accelerator, arch=arch)
    lacking = lacking_accelerator_warning(recipe, host, plan.block.accelerator, requested=accelerator,
                                          requested_by="--accelerator")
    return replace(plan, mirror=resolved, example=example, warnings=(lacking,) if lacking else ())


def install_recipe(plan: InstallPlan, *, mirror: Mirror | None = None, cache: ArtifactCache | None = None,
                   progress: bool | None = None) -> dict:
    """Fetch, verify and unpack ``plan``'s artifact into ``<cache>/external/<recipe>/``,
    from ``mirror`` (default ``plan.mirror``; for an example plan, the example's mirror
    served from the installed package on 127.0.0.1 for the time of the download).

    Returns ``{"recipe", "path", "binary", "source", "sha256", "policy"}``. Raises
    IntegrityError / FetchError / UnsafeContentError / StorageError (the disk failed) with
    nothing changed, and
    BuildError when the block has no source (user-provided binary) or the unpacked
    artifact lacks the declared binary at its top level.
    """
    eff, recipe = plan.block, plan.recipe
    prov = eff.provenance
    if prov.source is None:
        raise BuildError(f"{recipe.file}: {eff.path} has no source: the binary {eff.binary!r} is "
                         f"user-provided; put it at {external_dir(recipe.recipe) / (eff.binary or '')}")
    if plan.example and mirror is None:
        from lemonpack.examples import serve_mirror

        with serve_mirror() as url:
            fetched = fetch_target(eff, cache=cache or ArtifactCache(), mirror=Mirror(url), progress=progress)
    else:
        fetched = fetch_target(eff, cache=cache or ArtifactCache(), mirror=mirror or plan.mirror, progress=progress)
    dest = external_dir(recipe.recipe)
    try:
        return _install_into(dest, fetched, plan)
    except OSError as exc:
        raise StorageError(f"{recipe.file}: cannot install {recipe.recipe} into {dest}: "
                           f"{exc.strerror or exc}") from None


def _install_into(dest: Path, fetched, plan: InstallPlan) -> dict:
    eff, recipe = plan.block, plan.recipe
    prov = eff.provenance
    record = {"recipe": recipe.recipe, "path": str(dest), "binary": eff.binary, "source": prov.source,
              "sha256": sha256_text(fetched.sha256), "policy": prov.policy, "platform": eff.path}
    return commit_install(dest, record, lambda tree: unpack_target(fetched, tree, eff, cpu_arch=plan.cpu_arch))


def commit_install(dest: Path, record: dict, fill: Callable[[Path], object]) -> dict:
    """Install a new tree at ``dest`` (``<cache>/external/<recipe>/``) and its receipt
    (:func:`lemonpack.paths.install_record`), the one way every install ends: ``fill(tree)``
    creates the tree in a locked ``.<recipe>.install-*`` directory beside ``dest`` (one left by
    a killed install is swept first), the tree replaces ``dest`` in one ``renameat2`` exchange
    (never a moment without an install, never half of one), then ``record`` is written by temp
    file and rename. Any failure before the exchange leaves the previous install and receipt
    untouched. Returns ``record``; raises what ``fill`` raises and OSError."""
    for bad in ensure_dir(dest.parent, dest.parent.parent):
        log.warning("%s was not a directory; removed", bad)
    sweep(dest.parent, (f".{dest.name}.install-",))  # left by a killed install
    held = LockedDir(dest.parent, f".{dest.name}.install-")
    try:
        tree = held.path / "tree"
        fill(tree)
        replace_directory(tree, dest)
        replace_file(install_record(dest), (json.dumps(record, indent=2) + "\n").encode())
        return record
    finally:
        remove_tree(held.path)
        held.close()


def uninstall(recipe_id: str) -> dict:
    """Remove ``<cache>/external/<recipe_id>/`` and its receipt; returns ``{"recipe", "path",
    "removed"}``. The directory is first renamed aside (atomic), then the receipt removed,
    then the tree. Raises NotFoundError when nothing is installed for ``recipe_id``."""
    dest = external_dir(recipe_id)
    receipt = install_record(dest)
    if not dest.exists() and not receipt.exists():
        raise NotFoundError(f"{recipe_id} is not installed (no {dest})")
    removed = []
    aside = None
    if dest.exists():
        aside = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{recipe_id}.uninstall-"))
        os.rename(dest, aside / "tree")
        removed.append(str(dest))
    if receipt.exists():
        receipt.unlink()
        removed.append(str(receipt))
    if aside is not None:
        remove_tree(aside)
    return {"recipe": recipe_id, "path": str(dest), "removed": removed}
