"""The parts of a pod that decide whether a cluster admits and schedules it as meant.

- **Model mounts** (``--models hostpath``): the pod gets the model's own files and nothing
  beside them. Each checkpoint is its own read-only ``hostPath`` volume, ``type: File`` (a
  model file; a path that is not on this machine is taken as one, and the kubelet refuses
  to start the pod when the node holds no file there) or ``type: Directory`` for a
  checkpoint that is a directory on this machine (a bundle: exactly that directory), mounted
  at the same relative path under the model mount. A split GGUF
  (``NAME-00001-of-0000N.gguf``, llama.cpp's ``llama_split_path`` naming) brings the other
  parts found beside it, which llama.cpp opens from the first one's directory. A
  checkpoint inside a directory checkpoint is not mounted twice. A PersistentVolumeClaim or
  an OCI image volume is the model's own volume and stays one mount.
- **Resources** (:func:`resources`): ``requests.cpu`` :data:`CPU_REQUEST` and
  ``requests.memory`` the model's memory estimate, the figure ``lemonpack serve``'s
  admission uses (:func:`lemonpack.runtime.models.memory.estimate_model`: GGUF weights plus
  the KV cache at the launch's context size, from the one options merge
  :func:`lemonpack.runtime.launch.options.launch_options`; else the size on disk), plus the
  disk size of the other mounted files, rounded up to whole MiB; ``limits.memory`` that
  plus :data:`lemonpack.runtime.serving.budget.HEADROOM` (1 GiB, what serve keeps free
  beside its budget for compute buffers and the engine itself). No CPU limit (CFS quotas
  throttle token generation). So a pod is QoS class Burstable, never BestEffort, and a node
  is chosen with the model's memory free. A model file that is not on this machine has no
  estimate: only the CPU request is written (the caller warns).
- **Security** (:func:`pod_security`, :func:`container_security`): what Pod Security
  Standards "restricted" requires (https://kubernetes.io/docs/concepts/security/pod-security-standards/):
  ``runAsNonRoot: true``, ``runAsUser``/``runAsGroup`` :data:`RUN_AS_USER` (the user
  ``lemonpack build`` gives its images, :data:`lemonpack.builder.pipeline.IMAGE_USER`),
  ``seccompProfile: RuntimeDefault``; per container ``allowPrivilegeEscalation: false``,
  ``capabilities.drop: [ALL]``, ``readOnlyRootFilesystem: true`` (with an ``emptyDir`` at
  ``/tmp`` for scratch files); and no service-account token in the pod. ``hostPath``
  volumes and ``hostPort`` (``--models hostpath``, ``--publish``: the one-host options) are
  what "baseline" already forbids: use ``--models pvc:CLAIM`` or ``oci:...`` for a cluster
  that enforces it.
- **GPU scheduling** (:func:`tolerations`): a pod that requests a device tolerates the
  ``NoSchedule`` taint named after that resource (``nvidia.com/gpu``, ``amd.com/gpu``,
  ``gpu.intel.com/i915``, operator ``Exists``), the taint GPU node pools carry and the
  toleration Kubernetes' ``ExtendedResourceToleration`` admission plugin adds; its
  Deployment uses the ``Recreate`` strategy (a rolling update would need a spare GPU for the
  surge pod).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from lightkube.models import core_v1

from lemonpack.contract.model import Recipe
from lemonpack.errors import LemonpackError
from lemonpack.kube.accelerators import RESOURCES, Target
from lemonpack.runtime.launch.modelfiles import ModelSpec

#: The uid and gid pods run as: the ``User`` of images ``lemonpack build`` writes.
RUN_AS_USER = 65532
#: Every engine container's CPU request.
CPU_REQUEST = "1"
MIB = 1 << 20
#: The scratch volume mounted at ``/tmp`` (the root filesystem is read-only).
TMP_VOLUME = "tmp"
_SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<i>[0-9]{5})-of-(?P<n>[0-9]{5})\.gguf$")


@dataclass(frozen=True)
class HostMount:
    """One ``hostPath`` mount: ``host`` the path on the node, ``pod`` where it appears in the
    container, ``kind`` ``File`` or ``Directory``."""

    host: str
    pod: str
    kind: str


def split_parts(path: str) -> list[str]:
    """The other parts of a split GGUF whose first part is ``path`` (``X-00001-of-00003.gguf``
    gives ``X-00002-of-00003.gguf`` and ``X-00003-of-00003.gguf``) that exist on this machine;
    ``[]`` for any other file. Raises nothing."""
    m = _SPLIT.match(os.path.basename(path))
    if not m or int(m.group("i")) != 1:
        return []
    d, n = os.path.dirname(path), int(m.group("n"))
    parts = [os.path.join(d, f"{m.group('prefix')}-{i:05d}-of-{n:05d}.gguf") for i in range(2, n + 1)]
    return [p for p in parts if os.path.isfile(p)]


def host_mounts(local: dict[str, str], local_dir: str, mount: str) -> list[HostMount]:
    """The ``hostPath`` mounts of checkpoints ``local`` (name -> absolute path on this
    machine, inside ``local_dir``), under the container's model mount ``mount`` (module
    docstring), in pod-path order. Raises nothing."""
    paths: set[str] = set()
    for p in local.values():
        paths.add(p)
        paths.update(split_parts(p))
    dirs = sorted(p for p in paths if os.path.isdir(p))
    out = []
    for p in sorted(paths):
        if any(p != d and p.startswith(d.rstrip(os.sep) + os.sep) for d in dirs):
            continue  # inside a directory checkpoint: mounted with it
        rel = os.path.relpath(p, local_dir).split(os.sep)
        out.append(HostMount(p, "/".join([mount.rstrip("/"), *rel]), "Directory" if p in dirs else "File"))
    return out


def _disk(path: str) -> int:
    try:
        if os.path.isdir(path):
            return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs
                       if os.path.isfile(os.path.join(r, f)))
        return os.path.getsize(path)
    except OSError:
        return 0


def memory_bytes(recipe: Recipe, spec: ModelSpec, main: str, others: list[str]) -> int | None:
    """The bytes the engine of ``spec`` (served by ``recipe``) holds: the estimate of the
    main file ``main`` (absolute, on this machine) at the launch's options, plus the disk
    size of ``others`` (module docstring); None when ``main`` is not on this machine.
    Raises :class:`~lemonpack.errors.LemonpackError` for an option value the launch would
    refuse (a ``ctx_size`` that is not a number)."""
    from lemonpack.runtime.launch.options import launch_options, memory_options
    from lemonpack.runtime.models.memory import estimate_model

    if not os.path.exists(main):
        return None
    mem = memory_options(launch_options(recipe, spec.recipe_options))
    try:
        est = estimate_model(main, mem.ctx_size, mem.cache_type_k, mem.cache_type_v)
    except LemonpackError:
        return None
    return est.total + sum(_disk(p) for p in others if p != main)


def resources(target: Target, memory: int | None) -> core_v1.ResourceRequirements:
    """Requests and limits (module docstring) for ``memory`` bytes (None: unknown) on
    ``target``. Raises nothing."""
    from lemonpack.runtime.serving.budget import HEADROOM

    requests = {"cpu": CPU_REQUEST}
    limits = dict(target.resource_limits())
    if memory is not None:
        mib = max(1, math.ceil(memory / MIB))
        requests["memory"] = f"{mib}Mi"
        limits["memory"] = f"{mib + HEADROOM // MIB}Mi"
    return core_v1.ResourceRequirements(requests=requests, limits=limits or None)


def pod_security() -> core_v1.PodSecurityContext:
    """The pod's security context (module docstring)."""
    return core_v1.PodSecurityContext(runAsNonRoot=True, runAsUser=RUN_AS_USER, runAsGroup=RUN_AS_USER,
                                      seccompProfile=core_v1.SeccompProfile(type="RuntimeDefault"))


def container_security() -> core_v1.SecurityContext:
    """The engine container's security context (module docstring)."""
    return core_v1.SecurityContext(allowPrivilegeEscalation=False, readOnlyRootFilesystem=True,
                                   capabilities=core_v1.Capabilities(drop=["ALL"]))


def tolerations(target: Target) -> list[core_v1.Toleration] | None:
    """The toleration of the device resource's ``NoSchedule`` taint (module docstring);
    None for a CPU target."""
    if not target.vendor:
        return None
    return [core_v1.Toleration(key=RESOURCES[target.vendor], operator="Exists", effect="NoSchedule")]


__all__ = ["CPU_REQUEST", "HostMount", "RUN_AS_USER", "TMP_VOLUME", "container_security", "host_mounts",
           "memory_bytes", "pod_security", "resources", "split_parts", "tolerations"]
