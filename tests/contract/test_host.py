"""Host detection on built fake roots (``dev/``, ``sys/``, ``proc/``) and a real fake
``nvidia-smi`` program: ROCm, CUDA, Vulkan and CPU-only hosts (RFC section 9)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lemonpack.contract.host import HostFacts, detect_host
from lemonpack.errors import LemonpackError


@pytest.fixture(autouse=True)
def _no_injected_facts(monkeypatch):
    monkeypatch.delenv("LEMONPACK_HOST_FACTS", raising=False)


def _rocm(root: Path, version: str = "110501") -> None:
    (root / "dev").mkdir(exist_ok=True)
    (root / "dev/kfd").write_text("")
    cpu = root / "sys/class/kfd/kfd/topology/nodes/0"
    gpu = root / "sys/class/kfd/kfd/topology/nodes/1"
    cpu.mkdir(parents=True)
    gpu.mkdir(parents=True)
    (cpu / "properties").write_text("cpu_cores_count 16\ngfx_target_version 0\n")
    (gpu / "properties").write_text(f"simd_count 80\ngfx_target_version {version}\n")


def _nvidia_driver(root: Path) -> None:
    gpu = root / "proc/driver/nvidia/gpus/0000:01:00.0"
    gpu.mkdir(parents=True)
    (gpu / "information").write_text("Model: \t\t NVIDIA GeForce RTX 4090\nBus Type: \t PCIe\n")


def _nvidia_smi(path: Path, body: str) -> Path:
    """A real executable standing in for nvidia-smi; it checks the arguments it is given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n"
                    '[ "$1" = --query-gpu=compute_cap ] && [ "$2" = --format=csv,noheader ] || exit 9\n'
                    + body + "\n")
    os.chmod(path, 0o755)
    return path


def _vulkan(root: Path, icd: bool = True) -> None:
    (root / "dev/dri").mkdir(parents=True)
    (root / "dev/dri/renderD128").write_text("")
    if icd:
        (root / "usr/share/vulkan/icd.d").mkdir(parents=True)
        (root / "usr/share/vulkan/icd.d/radeon_icd.x86_64.json").write_text("{}")


def test_cpu_only_root(tmp_path):
    assert detect_host(tmp_path, nvidia_smi=tmp_path / "absent") == HostFacts("linux", frozenset({"cpu"}))


def test_rocm_root(tmp_path):
    _rocm(tmp_path)
    assert detect_host(tmp_path) == HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx1151")
    (tmp_path / "dev/kfd").unlink()  # topology without the device: no ROCm
    assert detect_host(tmp_path).accelerators == {"cpu"}


@pytest.mark.parametrize("version, arch", [("110501", "gfx1151"), ("90010", "gfx90a"), ("110000", "gfx1100")])
def test_rocm_arch_from_the_gfx_target_version(tmp_path, version, arch):
    _rocm(tmp_path, version)
    assert detect_host(tmp_path).rocm_arch == arch


def test_cuda_root_with_a_fake_nvidia_smi(tmp_path):
    _nvidia_driver(tmp_path / "root")
    smi = _nvidia_smi(tmp_path / "tools/nvidia-smi", "echo 8.9; echo 8.9")
    facts = detect_host(tmp_path / "root", nvidia_smi=smi)
    assert facts == HostFacts("linux", frozenset({"cpu", "cuda"}), cuda_arch="sm_89")
    assert facts.gpu_arch("cuda") == "sm_89" and facts.gpu_arch("vulkan") == "sm_89"


def test_cuda_nvidia_smi_found_inside_the_root(tmp_path):
    _nvidia_driver(tmp_path)
    _nvidia_smi(tmp_path / "usr/bin/nvidia-smi", "echo 12.0")
    assert detect_host(tmp_path).cuda_arch == "sm_120"


@pytest.mark.parametrize("body", ["exit 1", "echo 'No devices were found'", "echo"])
def test_cuda_driver_present_but_arch_unknown(tmp_path, body):
    _nvidia_driver(tmp_path / "root")
    smi = _nvidia_smi(tmp_path / "tools/nvidia-smi", body)
    facts = detect_host(tmp_path / "root", nvidia_smi=smi)
    assert "cuda" in facts.accelerators and facts.cuda_arch is None


def test_nvidia_smi_without_the_driver_is_not_cuda(tmp_path):
    smi = _nvidia_smi(tmp_path / "tools/nvidia-smi", "echo 9.0")
    (tmp_path / "root").mkdir()
    assert detect_host(tmp_path / "root", nvidia_smi=smi).accelerators == {"cpu"}


def test_vulkan_needs_a_render_node_and_an_icd(tmp_path):
    _vulkan(tmp_path / "a")
    assert detect_host(tmp_path / "a").accelerators == {"cpu", "vulkan"}
    _vulkan(tmp_path / "b", icd=False)
    assert detect_host(tmp_path / "b").accelerators == {"cpu"}


def test_rocm_cuda_vulkan_together(tmp_path):
    _rocm(tmp_path)
    _nvidia_driver(tmp_path)
    _vulkan(tmp_path)
    smi = _nvidia_smi(tmp_path / "tools/nvidia-smi", "echo 9.0")
    facts = detect_host(tmp_path, nvidia_smi=smi)
    assert facts.accelerators == {"cpu", "rocm", "cuda", "vulkan"}
    assert (facts.rocm_arch, facts.cuda_arch) == ("gfx1151", "sm_90")
    assert facts.gpu_arch("vulkan") == "gfx1151"  # AMD first for vulkan/gpu


def test_this_machine_agrees_with_detection_of_its_own_root():
    """True on any host: the default detection is the detection of ``/``, and cpu is in it."""
    facts = detect_host()
    assert facts == detect_host("/")
    assert "cpu" in facts.accelerators
    assert ("vulkan" in facts.accelerators) == (
        bool(list(Path("/dev/dri").glob("renderD*"))) and any(
            Path(d).is_dir() and any(p.suffix == ".json" for p in Path(d).iterdir())
            for d in ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d")))
    gpus = Path("/proc/driver/nvidia/gpus")
    assert ("cuda" in facts.accelerators) == (gpus.is_dir() and any(gpus.iterdir()))
    assert ("rocm" in facts.accelerators) == (facts.rocm_arch is not None)


def test_detect_host_on_this_machine_and_injected(monkeypatch):
    monkeypatch.delenv("LEMONPACK_HOST_FACTS", raising=False)
    facts = detect_host()
    assert facts.os == "linux" and "cpu" in facts.accelerators and facts == detect_host("/")
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", json.dumps({"os": "linux", "accelerators": ["rocm"],
                                                           "rocm_arch": "gfx1151"}))
    assert detect_host() == HostFacts("linux", frozenset({"cpu", "rocm"}), rocm_arch="gfx1151")


def test_platform_key_constants_match_the_schema():
    from lemonpack.contract.builtins import ACCELERATORS, OS_NAMES
    from lemonpack.contract.schemalock import load_schema

    schema = load_schema(1)
    assert tuple(schema["properties"]["platforms"]["propertyNames"]["enum"]) == OS_NAMES
    assert tuple(schema["$defs"]["accelerator"]["enum"]) == ACCELERATORS


@pytest.mark.parametrize("facts, needle", [
    ('{"os": "linux", "accelerators": "rocm"}', "'accelerators' must be a list"),
    ('{"os": "plan9"}', "'os' must be one of linux, darwin, windows"),
    ('{"os": "linux", "gpu": "x"}', "unknown key 'gpu'"),
    ('{"os": "linux", "accelerators": ["quantum"]}', "unknown accelerator 'quantum'"),
    ('{"os": "linux", "rocm_arch": 1151}', "'rocm_arch' must be a string"),
    ('[]', "not a JSON object"),
])
def test_injected_host_facts_are_validated(monkeypatch, facts, needle):
    monkeypatch.setenv("LEMONPACK_HOST_FACTS", facts)
    with pytest.raises(LemonpackError, match="LEMONPACK_HOST_FACTS") as e:
        detect_host()
    assert needle in str(e.value)
