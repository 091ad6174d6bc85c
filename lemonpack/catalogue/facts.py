"""The facts the index records of an entry, derived from its recipe or extension alone: its
platforms (OS, accelerator, GPU archs) and its pinning (images by digest, artifacts by
sha256). :mod:`.build` puts them into the entries."""

from __future__ import annotations

import json
from typing import Any

from lemonpack.catalogue import archs
from lemonpack.contract.cpuartifacts import offered_cpus
from lemonpack.digest import Digest
from lemonpack.errors import LemonpackError


#: Extension requirement -> (accelerator, or os) used for an extension's platforms.
_REQ_ACCEL = {"hip": "rocm", "cuda": "cuda", "vulkan": "vulkan"}


_REQ_OS = {"linux": "linux", "windows": "windows", "macos": "darwin"}


#: The OSes an accelerator exists on (ROCm/HIP and CUDA have no macOS builds); others: every OS.
_ACCEL_OSES = {"rocm": ("linux", "windows"), "cuda": ("linux", "windows")}


def recipe_platforms(recipe) -> list[dict]:
    """The index's platforms of a recipe: per block ``{"os", "accelerator", "archs",
    "arch_patterns", "any_arch"}``; patterns are the block's arch override keys plus the keys of
    ``arch_aliases`` when the block uses ``{arch_alias}``; archs their expansion; ``any_arch``:
    the block runs on every GPU arch of its accelerator (:func:`runs_on_any_arch`); ``cpu_archs``
    the CPUs of its per-CPU artifacts, when the recipe gives them
    (:func:`lemonpack.contract.cpuartifacts.offered_cpus`)."""
    out = []
    aliases = [k for k, _ in recipe.arch_aliases]
    doc_platforms = thaw(recipe.document).get("platforms", {})
    for os_name, blocks in recipe.platforms.items():
        for accel, block in blocks.items():
            patterns = [o.pattern for o in block.arch]
            raw = json.dumps(doc_platforms.get(os_name, {}).get(accel, {}))
            if "{arch_alias}" in raw:
                patterns += [a for a in aliases if a not in patterns]
            cpus = offered_cpus(recipe, os_name, accel)  # only a recipe with per-CPU artifacts says
            out.append({"os": os_name, "accelerator": accel, "archs": archs.expand(accel, patterns),
                        "arch_patterns": patterns, "any_arch": runs_on_any_arch(recipe, block),
                        **({"cpu_archs": list(cpus)} if cpus else {})})
    return out


def runs_on_any_arch(recipe, block) -> bool:
    """Whether ``install`` (:func:`lemonpack.builder.install.plan_install`) finds an artifact
    for ``block`` on a host whose GPU arch matches none of its overrides: the block (or the
    recipe) has a base artifact, or no override carries one (nothing is fetched per arch), or
    the recipe is a passthrough (nothing to install; ``run`` uses the base block)."""
    from lemonpack.builder.install import plan_install
    from lemonpack.contract.host import HostFacts
    from lemonpack.errors import BuildError, SelectionError

    host = HostFacts(block.os, frozenset({"cpu", block.accelerator}))
    try:
        plan_install(recipe, host, accelerator=block.accelerator)
    except BuildError:
        return True
    except SelectionError:
        return False
    return True


def extension_platforms(ext) -> list[dict]:
    """Platforms of an extension from its targets' requirements (``hip`` -> rocm, ``cuda``,
    ``vulkan``, else cpu; ``linux``/``windows``/``macos`` or every OS the accelerator exists
    on: rocm and cuda never on darwin); ``testing`` targets are left out. Sorted, deduplicated."""
    seen = set()
    for t in ext.targets:
        req = set(t.requires)
        if "testing" in req:
            continue
        oses = [_REQ_OS[r] for r in sorted(req) if r in _REQ_OS] or ["linux", "windows", "darwin"]
        accels = [_REQ_ACCEL[r] for r in sorted(req) if r in _REQ_ACCEL] or ["cpu"]
        for o in oses:
            for a in accels:
                if o in _ACCEL_OSES.get(a, (o,)):
                    seen.add((o, a))
    return [{"os": o, "accelerator": a, "archs": [], "arch_patterns": [], "any_arch": True} for o, a in sorted(seen)]


def pinning(recipe) -> dict:
    """Pinning of a recipe: every container image (``{"ref", "pinned"}``: pinned by digest)
    and every artifact (``{"url", "sha256"}``; sha256 None when the artifact is not pinned);
    ``status`` ``all`` / ``partly`` / ``none`` (``all`` when there is nothing to pin)."""
    from lemonpack.contract.select import targets
    from lemonpack.oci.reference import check_pinned
    from lemonpack.registry.pin import image_sites

    images = {}
    for site in image_sites(thaw(recipe.document)):
        images[site.image] = check_pinned(site.image) is None
    arts = {}
    try:
        for t in targets(recipe):
            if t.provenance.source:
                pinned = t.provenance.sha256 and t.provenance.policy != "roll_forward"
                sha = t.provenance.sha256 if pinned else None
                if sha:
                    sha = str(Digest.parse(sha, bare=True))
                arts[t.provenance.source] = sha
    except LemonpackError:
        pass
    flags = list(images.values()) + [v is not None for v in arts.values()]
    status = "all" if all(flags) else ("none" if not any(flags) else "partly")
    return {"status": status, "images": [{"ref": r, "pinned": p} for r, p in sorted(images.items())],
            "artifacts": [{"url": u, "sha256": s} for u, s in sorted(arts.items())]}


def thaw(value: Any) -> Any:
    """A frozen recipe document as plain dicts and lists."""
    from lemonpack.contract.model import thaw as _thaw

    return _thaw(value)
