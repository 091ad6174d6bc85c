"""Accelerator targets of ``kube generate`` (lemonpack/kube/accelerators.py): a target's resources,
node affinity labels and the host facts it stands for."""

from __future__ import annotations

import pytest

from lemonpack.kube.accelerators import AMD_FAMILY_LABEL, INTEL_GPU_LABEL, NVIDIA_MAJOR_LABEL, NVIDIA_MINOR_LABEL, Target


@pytest.mark.parametrize("text, limits, reqs", [
    ("cpu", {}, []),
    ("cuda", {"nvidia.com/gpu": "1"}, []),
    ("cuda:sm_90", {"nvidia.com/gpu": "1"}, [(NVIDIA_MAJOR_LABEL, "9"), (NVIDIA_MINOR_LABEL, "0")]),
    ("cuda:sm_120", {"nvidia.com/gpu": "1"}, [(NVIDIA_MAJOR_LABEL, "12"), (NVIDIA_MINOR_LABEL, "0")]),
    ("rocm:gfx942", {"amd.com/gpu": "1"}, [(AMD_FAMILY_LABEL, "AI")]),
    ("vulkan:gfx1100", {"amd.com/gpu": "1"}, [(AMD_FAMILY_LABEL, "GC_11_0_0")]),
    ("vulkan:sm_86", {"nvidia.com/gpu": "1"}, [(NVIDIA_MAJOR_LABEL, "8"), (NVIDIA_MINOR_LABEL, "6")]),
    ("vulkan:intel", {"gpu.intel.com/i915": "1"}, [(INTEL_GPU_LABEL, "true")]),
    ("oneapi", {"gpu.intel.com/i915": "1"}, []),
])
def test_targets(text, limits, reqs):
    t = Target.parse(text)
    assert t.resource_limits() == limits and t.node_selector_requirements() == reqs
    facts = t.host_facts()
    assert facts.os == "linux" and t.accelerator in facts.accelerators
    if t.arch and t.arch.startswith("gfx"):
        assert facts.rocm_arch == t.arch and facts.gpu_arch(t.accelerator) == t.arch
    if t.arch and t.arch.startswith("sm_"):
        assert facts.cuda_arch == t.arch and facts.gpu_arch(t.accelerator) == t.arch
