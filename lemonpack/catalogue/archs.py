"""GPU arch tables and the expansion of arch patterns (exact keys and globs of a platform
block's ``arch`` map, and the keys of ``arch_aliases``) into concrete archs (RFC section 4.6).

A catalogue facet needs concrete names ("gfx1151"), a recipe writes patterns ("gfx115*"):
:func:`expand` matches each pattern against :data:`KNOWN_ARCHS` of the block's accelerator
with the contract's own matcher (:func:`lemonpack.contract.select.match_pattern`), so a glob
means in the catalogue what it means at selection time. Exact keys are kept as written even
when the table does not know them (a newer GPU).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from lemonpack.contract.select import is_glob

#: AMD GPU archs (LLVM AMDGPU processor names, as ROCm's KFD reports them: ``gfx`` + target).
ROCM_ARCHS: tuple[str, ...] = (
    "gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a", "gfx90c", "gfx940", "gfx941", "gfx942",
    "gfx950", "gfx1010", "gfx1011", "gfx1012", "gfx1013", "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034",
    "gfx1035", "gfx1036", "gfx1037", "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
    "gfx1200", "gfx1201",
)
#: NVIDIA compute capabilities as ``sm_XY`` (what :func:`lemonpack.contract.host.detect_cuda_arch` reports).
CUDA_ARCHS: tuple[str, ...] = (
    "sm_50", "sm_52", "sm_53", "sm_60", "sm_61", "sm_62", "sm_70", "sm_72", "sm_75", "sm_80", "sm_86", "sm_87",
    "sm_89", "sm_90", "sm_100", "sm_101", "sm_103", "sm_120", "sm_121",
)
#: Per accelerator, the archs its blocks' arch maps are matched against (the same arch
#: :meth:`HostFacts.gpu_arch` hands selection: ROCm for rocm, CUDA for cuda, either for the
#: generic GPU accelerators; none for cpu/npu/tpu/metal).
KNOWN_ARCHS: dict[str, tuple[str, ...]] = {
    "rocm": ROCM_ARCHS, "cuda": CUDA_ARCHS, "vulkan": ROCM_ARCHS + CUDA_ARCHS, "gpu": ROCM_ARCHS + CUDA_ARCHS,
    "oneapi": ROCM_ARCHS + CUDA_ARCHS,
}


def _key(arch: str) -> tuple:
    """Order archs as the tables do (family, then number), unknown ones after, by name."""
    for table in (ROCM_ARCHS, CUDA_ARCHS):
        if arch in table:
            return (0, (ROCM_ARCHS + CUDA_ARCHS).index(arch), arch)
    return (1, 0, arch)


def expand(accelerator: str, patterns: Iterable[str]) -> list[str]:
    """Concrete archs named by ``patterns`` for a block of ``accelerator``: each exact key
    as written, each glob (``*``, ``?``, ``[``) replaced by the known archs it matches
    (``fnmatchcase``, as selection matches). Deduplicated, in table order. ``[]`` when no
    pattern is given (the block is not arch-specific). Raises nothing."""
    table = KNOWN_ARCHS.get(accelerator, ())
    out: set[str] = set()
    for p in patterns:
        if is_glob(p):
            out.update(a for a in table if fnmatch.fnmatchcase(a, p))
        else:
            out.add(p)
    return sorted(out, key=_key)
