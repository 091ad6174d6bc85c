"""Host facts: what platform selection needs to know about a machine (RFC sections 3, 9).

Selection is a pure function of an explicit :class:`HostFacts`; :func:`detect_host`
is the one place that reads the real machine (``/dev``, ``/sys``, ``/proc``,
``nvidia-smi``), and it takes a ``root`` and an ``nvidia_smi`` program so tests can point
it at a fake tree and a fake tool. ``LEMONPACK_HOST_FACTS``
(JSON, the shape of :meth:`HostFacts.to_json`) replaces detection entirely.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lemonpack.errors import ConfigError, LemonpackError
from lemonpack.exe_header import OCI_ARCHITECTURES, goarch

#: Section 9's runtime detection order (metal first on macOS).
DETECTION_ORDER: tuple[str, ...] = ("cuda", "rocm", "vulkan", "gpu", "cpu")

_OS_NAMES = {"Linux": "linux", "Darwin": "darwin", "Windows": "windows"}


@dataclass(frozen=True)
class HostFacts:
    """A host: ``os`` (``linux``/``darwin``/``windows``), ``accelerators`` present
    (always including ``cpu``), the AMD GPU arch ``rocm_arch`` (``gfx1151``) and the
    NVIDIA arch ``cuda_arch`` (``sm_90``), each None when absent; ``cpu_arch``: the CPU's OCI
    architecture (``amd64``, ``arm64``: :data:`lemonpack.exe_header.OCI_ARCHITECTURES`), None
    for facts that do not say (then :attr:`cpu` is this machine's)."""

    os: str
    accelerators: frozenset[str] = frozenset({"cpu"})
    rocm_arch: str | None = None
    cuda_arch: str | None = None
    cpu_arch: str | None = None

    @property
    def cpu(self) -> str:
        """The CPU architecture artifacts must be built for: ``cpu_arch``, else this machine's
        (``platform.machine()`` in OCI names)."""
        return self.cpu_arch or goarch(platform.machine())

    def gpu_arch(self, accelerator: str) -> str | None:
        """The GPU arch that arch overrides match for a block of ``accelerator``:
        the ROCm arch for rocm, the CUDA arch for cuda, whichever GPU exists for
        vulkan/gpu/oneapi (AMD first), None for cpu."""
        if accelerator == "rocm":
            return self.rocm_arch
        if accelerator == "cuda":
            return self.cuda_arch
        if accelerator in ("cpu", "npu", "tpu", "metal"):
            return None
        return self.rocm_arch or self.cuda_arch

    def to_json(self) -> dict:
        """``{"os", "accelerators" (sorted), "rocm_arch", "cuda_arch"}`` and ``"cpu_arch"`` when
        known: the shape ``LEMONPACK_HOST_FACTS`` takes."""
        out = {"os": self.os, "accelerators": sorted(self.accelerators),
               "rocm_arch": self.rocm_arch, "cuda_arch": self.cuda_arch}
        if self.cpu_arch is not None:
            out["cpu_arch"] = self.cpu_arch
        return out

    @classmethod
    def from_json(cls, data: dict) -> "HostFacts":
        """Build from :meth:`to_json`'s shape. Raises LemonpackError naming the offending
        key for an unknown key, an unknown OS or accelerator, or a value of the wrong type."""
        from lemonpack.contract.builtins import ACCELERATORS, OS_NAMES

        def fail(msg: str) -> LemonpackError:
            return LemonpackError(f"invalid host description: {msg} (expected "
                                  '{"os": "linux", "accelerators": ["rocm"], "rocm_arch": "gfx1151", '
                                  '"cuda_arch": null, "cpu_arch": "amd64"})')

        if not isinstance(data, dict):
            raise fail("not a JSON object")
        unknown = sorted(set(data) - {"os", "accelerators", "rocm_arch", "cuda_arch", "cpu_arch"})
        if unknown:
            raise fail(f"unknown key {unknown[0]!r}")
        if data.get("os") not in OS_NAMES:
            raise fail(f"'os' must be one of {', '.join(OS_NAMES)}, got {data.get('os')!r}")
        accels = data.get("accelerators", ["cpu"])
        if not isinstance(accels, list) or not all(isinstance(a, str) for a in accels):
            raise fail("'accelerators' must be a list of strings")
        bad = [a for a in accels if a not in ACCELERATORS]
        if bad:
            raise fail(f"unknown accelerator {bad[0]!r} in 'accelerators'")
        for key in ("rocm_arch", "cuda_arch"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise fail(f"{key!r} must be a string or null")
        cpu = data.get("cpu_arch")
        if cpu is not None and cpu not in OCI_ARCHITECTURES:
            raise fail(f"'cpu_arch' must be one of {', '.join(OCI_ARCHITECTURES)} or null, got {cpu!r}")
        return cls(os=data["os"], accelerators=frozenset(accels) | {"cpu"},
                   rocm_arch=data.get("rocm_arch"), cuda_arch=data.get("cuda_arch"), cpu_arch=cpu)


def _gfx_from_target_version(value: int) -> str:
    """KFD ``gfx_target_version`` (major*10000 + minor*100 + stepping) to ``gfxNNN``."""
    major, minor, step = value // 10000, (value // 100) % 100, value % 100
    return f"gfx{major}{minor}{step:x}"


def detect_rocm_arch(root: Path) -> str | None:
    """The first GPU's gfx arch from KFD topology under ``root`` (None without /dev/kfd)."""
    if not (root / "dev/kfd").exists():
        return None
    nodes = sorted((root / "sys/class/kfd/kfd/topology/nodes").glob("*/properties"))
    for props in nodes:
        for line in props.read_text(errors="replace").splitlines():
            key, _, value = line.partition(" ")
            if key == "gfx_target_version" and value.strip().isdigit() and int(value) > 0:
                return _gfx_from_target_version(int(value))
    return None


def nvidia_gpus(root: Path) -> list[Path]:
    """The GPUs the NVIDIA kernel driver lists under ``root``
    (``proc/driver/nvidia/gpus/<pci-address>/``, one directory each; NVIDIA driver
    README, "procfs interface"). Empty without the driver."""
    d = root / "proc/driver/nvidia/gpus"
    try:
        return sorted(p for p in d.iterdir() if p.is_dir())
    except OSError:
        return []


def _default_nvidia_smi(root: Path) -> str | None:
    if root == Path("/"):
        return shutil.which("nvidia-smi")
    for d in ("usr/bin", "bin", "usr/local/bin"):
        if os.access(root / d / "nvidia-smi", os.X_OK):
            return str(root / d / "nvidia-smi")
    return None


def detect_cuda_arch(root: Path, nvidia_smi: str | os.PathLike[str] | None = None) -> str | None:
    """``sm_XY`` of the first GPU from ``nvidia-smi --query-gpu=compute_cap
    --format=csv,noheader`` (nvidia-smi(1), driver >= 510) when the NVIDIA driver lists a
    GPU under ``root``; None without a GPU, without nvidia-smi, or when it fails or
    prints something else. ``nvidia_smi`` is the program to run (default: ``nvidia-smi``
    on ``PATH`` for ``/``, else ``<root>/usr/bin/nvidia-smi``); it runs without a shell,
    10 s at most."""
    if not nvidia_gpus(root):
        return None
    exe = os.fspath(nvidia_smi) if nvidia_smi is not None else _default_nvidia_smi(root)
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.strip().splitlines()[0].strip() if out.strip() else ""
    major, dot, minor = first.partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        return None
    return f"sm_{major}{minor}"


def detect_vulkan(root: Path) -> bool:
    """A render node (``dev/dri/renderD*``) and at least one installed Vulkan ICD manifest
    (``usr/share/vulkan/icd.d`` or ``etc/vulkan/icd.d``, the Khronos loader's search
    directories, LoaderDriverInterface.md) under ``root``."""
    if not list((root / "dev/dri").glob("renderD*")):
        return False
    for d in ("usr/share/vulkan/icd.d", "etc/vulkan/icd.d"):
        try:
            if any(p.suffix == ".json" for p in (root / d).iterdir()):
                return True
        except OSError:
            continue
    return False


def detect_host(root: str | Path = "/", *, nvidia_smi: str | os.PathLike[str] | None = None) -> HostFacts:
    """Describe the machine. ``LEMONPACK_HOST_FACTS`` (JSON) overrides detection.

    ``root`` is where ``dev/``, ``sys/`` and ``proc/`` are read (tests pass a fake tree),
    ``nvidia_smi`` the program asked for the CUDA arch (see :func:`detect_cuda_arch`).
    Accelerators: ``cpu`` always; ``metal`` on macOS; ``rocm`` when ``dev/kfd`` exists and
    KFD topology names a GPU arch; ``cuda`` when the NVIDIA driver lists a GPU (arch from
    nvidia-smi, None if it cannot tell); ``vulkan`` per :func:`detect_vulkan`. The OS is
    the running one, the CPU this machine's (``cpu_arch`` None: :attr:`HostFacts.cpu`). Raises LemonpackError for an invalid ``LEMONPACK_HOST_FACTS``.
    """
    injected = os.environ.get("LEMONPACK_HOST_FACTS")
    if injected:
        try:
            data = json.loads(injected)
        except json.JSONDecodeError as e:
            raise ConfigError(f"LEMONPACK_HOST_FACTS is not valid JSON: {e}") from None
        try:
            return HostFacts.from_json(data)
        except LemonpackError as e:
            raise ConfigError(f"LEMONPACK_HOST_FACTS: {e}") from None
    root = Path(root)
    os_name = _OS_NAMES.get(platform.system(), platform.system().lower())
    accels = {"cpu"}
    if os_name == "darwin":
        accels.add("metal")
    rocm = detect_rocm_arch(root)
    if rocm:
        accels.add("rocm")
    cuda = detect_cuda_arch(root, nvidia_smi)
    if nvidia_gpus(root):
        accels.add("cuda")
    if detect_vulkan(root):
        accels.add("vulkan")
    return HostFacts(os=os_name, accelerators=frozenset(accels), rocm_arch=rocm, cuda_arch=cuda)
