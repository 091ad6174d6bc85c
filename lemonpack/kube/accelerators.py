"""The accelerator a pod targets: device-plugin resources and node affinity on the GPU arch.

A target is written ``ACCELERATOR[:ARCH]`` (``--accelerator``): ``cpu``, ``cuda:sm_90``,
``rocm:gfx1151``, ``vulkan:gfx1100``, ``vulkan:sm_86``, ``vulkan:intel``, ``oneapi``. It
selects the recipe's ``platforms.linux.<ACCELERATOR>`` block and, through the arch, the arch
override (RFC sections 4.6 and 9, :func:`lemonpack.contract.select.select_block`); the
hardware tokens (``{rocm_arch}``, ``{cuda_arch}``, ``{arch_alias}``, ``{target_device}``)
resolve from :meth:`Target.host_facts`, the target's host description.

Resources (one device per pod: one model per GPU), the names the vendors' device plugins
register:

- NVIDIA (``cuda``, or ``vulkan``/``gpu`` with an ``sm_XY`` arch): ``nvidia.com/gpu``
  (NVIDIA k8s-device-plugin README, "Running GPU Jobs");
- AMD (``rocm``, or ``vulkan``/``gpu`` with a ``gfx*`` arch): ``amd.com/gpu`` (ROCm
  k8s-device-plugin README);
- Intel (``oneapi``, or ``vulkan``/``gpu`` with the arch ``intel``): ``gpu.intel.com/i915``
  (intel-device-plugins-for-kubernetes, GPU plugin README).

Node affinity (required during scheduling) on the labels that node-labelling agents publish:

- NVIDIA GPU feature discovery (NVIDIA/gpu-feature-discovery README, "Generated Labels"):
  ``nvidia.com/gpu.compute.major`` and ``nvidia.com/gpu.compute.minor``, the CUDA compute
  capability; ``sm_90`` is major ``9``, minor ``0`` (the last digit is the minor: ``sm_120``
  is 12.0);
- the AMD device plugin's node labeller (ROCm/k8s-device-plugin ``cmd/k8s-node-labeller``,
  option ``-family``): ``amd.com/gpu.family``, the GPU family libdrm names (``AI``, ``NV``,
  ``GC_11_0_0``, ``GC_11_5_0`` ...). A family groups several gfx archs (gfx1150, gfx1151 and
  gfx1152 are all ``GC_11_5_0``): the finest label the labeller publishes about the arch.
  :data:`AMD_FAMILIES` maps the archs lemonpack knows (every arch of
  :data:`lemonpack.catalogue.archs.ROCM_ARCHS`, the tests hold the two tables equal), from the
  family the kernel gives each graphics-core IP version (Linux
  ``drivers/gpu/drm/amd/amdgpu/amdgpu_discovery.c``, ``amdgpu_discovery_set_ip_blocks``:
  GC 9.4.2 (gfx90a) and 9.4.3 (gfx940-942) are ``AMDGPU_FAMILY_AI``, GC 9.3.0 (gfx90c) ``RV``,
  GC 10.1.3 (gfx1013) ``NV``, GC 11.5.x (gfx1150-1153) ``GC_11_5_0`` ...); another gfx arch is
  refused rather than scheduled anywhere. An arch is an LLVM AMDGPU processor name: ``gfx``, the
  major version in decimal, then one digit each for minor and stepping, the stepping in hex
  (``gfx90a`` is 9.0.10, ``gfx1151`` is 11.5.1, the spelling
  :func:`lemonpack.contract.host.detect_rocm_arch` derives from KFD's ``gfx_target_version``);
- Intel: ``intel.feature.node.kubernetes.io/gpu: "true"``, the label of the NFD rules shipped
  with the Intel device plugins.

Without an arch there is no affinity: the resource request alone keeps the pod on nodes with
that vendor's GPUs. ``cpu`` asks for no device. ``metal``, ``npu`` and ``tpu`` have no device
plugin here and are refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from lemonpack.contract.builtins import ACCELERATORS
from lemonpack.contract.host import HostFacts
from lemonpack.errors import LemonpackError

#: Device-plugin resource of each GPU vendor.
RESOURCES: Mapping[str, str] = MappingProxyType({
    "nvidia": "nvidia.com/gpu",
    "amd": "amd.com/gpu",
    "intel": "gpu.intel.com/i915",
})

#: NVIDIA GPU feature discovery's compute-capability labels.
NVIDIA_MAJOR_LABEL = "nvidia.com/gpu.compute.major"
NVIDIA_MINOR_LABEL = "nvidia.com/gpu.compute.minor"
#: The AMD node labeller's family label.
AMD_FAMILY_LABEL = "amd.com/gpu.family"
#: The Intel device plugins' NFD label of a node with an Intel GPU.
INTEL_GPU_LABEL = "intel.feature.node.kubernetes.io/gpu"

#: gfx arch -> the AMD node labeller's ``amd.com/gpu.family`` value (libdrm ``amdgpu``
#: family names: AI = Vega/CDNA, RV = Raven, NV = Navi 1x/2x, VGH = Van Gogh, YC = Yellow
#: Carp, GC_x_y_z = graphics core x.y.z).
AMD_FAMILIES: Mapping[str, str] = MappingProxyType({
    **{a: "AI" for a in ("gfx900", "gfx904", "gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950")},
    **{a: "RV" for a in ("gfx902", "gfx909", "gfx90c")},
    **{a: "NV" for a in ("gfx1010", "gfx1011", "gfx1012", "gfx1013", "gfx1030", "gfx1031", "gfx1032", "gfx1034")},
    "gfx1033": "VGH",
    "gfx1035": "YC",
    "gfx1036": "GC_10_3_6",
    "gfx1037": "GC_10_3_7",
    **{a: "GC_11_0_0" for a in ("gfx1100", "gfx1101", "gfx1102")},
    "gfx1103": "GC_11_0_1",
    **{a: "GC_11_5_0" for a in ("gfx1150", "gfx1151", "gfx1152", "gfx1153")},
    **{a: "GC_12_0_0" for a in ("gfx1200", "gfx1201")},
})

#: ``gfx`` + major (1-2 decimal digits) + minor (1 digit) + stepping (1 hex digit): gfx900, gfx90a, gfx1151.
_GFX = re.compile(r"^gfx[1-9][0-9]?[0-9][0-9a-f]$")
_SM = re.compile(r"^sm_([0-9]{2,3})$")
_NO_PLUGIN = ("metal", "npu", "tpu")


class TargetError(LemonpackError):
    """A ``--accelerator`` value that names no target lemonpack can schedule."""

    kind = "kube-accelerator"


@dataclass(frozen=True)
class Target:
    """What the pods run on: ``accelerator`` (a platform block key), ``arch`` (``gfx1151``,
    ``sm_90``, ``intel`` or None) and ``vendor`` (``nvidia``, ``amd``, ``intel``, None for cpu)."""

    accelerator: str
    arch: str | None = None
    vendor: str | None = None

    @classmethod
    def parse(cls, text: str) -> "Target":
        """Read ``ACCELERATOR[:ARCH]`` (module docstring). Raises :class:`TargetError` for an
        unknown accelerator, one without a device plugin, an arch of the wrong vendor or shape,
        and ``vulkan``/``gpu`` without an arch (the vendor is then unknown). An arch is read
        case-insensitively (``GFX90A`` is ``gfx90a``); an NVIDIA arch may be written as the
        compute capability (``9.0``, as ``nvidia-smi --query-gpu=compute_cap`` prints it) or as
        an arch-specific compile target (``sm_90a``, ``sm_100f``): both name the device
        ``sm_90``/``sm_100``, the capability the node labels carry."""
        accel, _, arch_text = text.strip().partition(":")
        arch = _normal_arch(arch_text) or None
        if accel not in ACCELERATORS:
            raise TargetError(f"--accelerator {text!r}: unknown accelerator {accel!r} "
                              f"(known: {', '.join(ACCELERATORS)})")
        if accel in _NO_PLUGIN:
            raise TargetError(f"--accelerator {text!r}: no Kubernetes device plugin is known for {accel!r}")
        if accel == "cpu":
            if arch:
                raise TargetError(f"--accelerator {text!r}: cpu takes no GPU arch")
            return cls("cpu")
        vendor = _vendor_of(arch) if arch else None
        if arch and vendor is None:
            raise TargetError(f"--accelerator {text!r}: arch {arch!r} is not gfx<major><minor><stepping> (AMD: "
                              "gfx90a, gfx1151), sm_NN (NVIDIA) or intel")
        want = {"cuda": "nvidia", "rocm": "amd", "oneapi": "intel"}.get(accel)
        if want is not None:
            if vendor not in (None, want):
                raise TargetError(f"--accelerator {text!r}: {accel} runs on {want} GPUs, not on arch {arch!r}")
            vendor = want
        elif vendor is None:
            raise TargetError(f"--accelerator {text!r}: {accel} runs on any vendor's GPU; name it with the arch "
                              f"({accel}:gfx1100, {accel}:sm_86 or {accel}:intel)")
        if vendor == "amd" and arch and arch not in AMD_FAMILIES:
            raise TargetError(f"--accelerator {text!r}: no AMD node-labeller family is known for {arch} "
                              f"(known archs: {', '.join(sorted(AMD_FAMILIES))})")
        return cls(accel, arch, vendor)

    def host_facts(self) -> HostFacts:
        """The host the pod's launch plan resolves for: Linux with this accelerator (and cpu),
        the arch as ``rocm_arch`` (gfx) or ``cuda_arch`` (sm)."""
        rocm = self.arch if self.arch and self.arch.startswith("gfx") else None
        cuda = self.arch if self.arch and self.arch.startswith("sm_") else None
        return HostFacts(os="linux", accelerators=frozenset({self.accelerator, "cpu"}), rocm_arch=rocm,
                         cuda_arch=cuda)

    def resource_limits(self) -> dict[str, str]:
        """``{resource name: "1"}`` for a GPU target, ``{}`` for cpu."""
        return {RESOURCES[self.vendor]: "1"} if self.vendor else {}

    def node_selector_requirements(self) -> list[tuple[str, str]]:
        """``[(label key, required value)]`` for node affinity, sorted by key; empty without
        an arch (module docstring)."""
        if not self.arch or not self.vendor:
            return []
        if self.vendor == "nvidia":
            digits = _SM.match(self.arch).group(1)  # type: ignore[union-attr]
            return sorted([(NVIDIA_MAJOR_LABEL, digits[:-1]), (NVIDIA_MINOR_LABEL, digits[-1])])
        if self.vendor == "amd":
            return [(AMD_FAMILY_LABEL, AMD_FAMILIES[self.arch])]
        return [(INTEL_GPU_LABEL, "true")]

    def __str__(self) -> str:
        return f"{self.accelerator}:{self.arch}" if self.arch else self.accelerator


_CAPABILITY = re.compile(r"^([1-9][0-9]?)\.([0-9])$")
_SM_TARGET = re.compile(r"^(sm_[0-9]{2,3})[af]$")


def _normal_arch(text: str) -> str:
    """``text`` as the arch tables spell it (see :meth:`Target.parse`): lowercase, ``9.0`` and
    ``sm_90a`` as ``sm_90``; anything else unchanged (judged by the caller)."""
    arch = text.strip().lower()
    if m := _CAPABILITY.match(arch):
        return f"sm_{m.group(1)}{m.group(2)}"
    if m := _SM_TARGET.match(arch):
        return m.group(1)
    return arch


def _vendor_of(arch: str) -> str | None:
    if _GFX.match(arch):
        return "amd"
    if _SM.match(arch):
        return "nvidia"
    if arch == "intel":
        return "intel"
    return None


__all__ = ["AMD_FAMILIES", "AMD_FAMILY_LABEL", "INTEL_GPU_LABEL", "NVIDIA_MAJOR_LABEL", "NVIDIA_MINOR_LABEL",
           "RESOURCES", "Target", "TargetError"]
