"""``lemonpack kube generate``: registered models and recipes to Kubernetes objects.

Input: :class:`KubeModel` s (a model's name, its checkpoints on this machine, the recipe that
serves it, where the pod gets the model from) and :class:`GenerateOptions` (images by recipe,
the target accelerator, namespace, replicas, an optional loopback publication). Output: per
model a ``Deployment`` (apps/v1) and a ``Service`` (v1), built as typed objects
(``lightkube.models``), as plain documents (:func:`generate`) and as YAML (:func:`render_yaml`).

Per model:

1. the recipe's ``platforms.linux.<accelerator>`` block must exist (the accelerator of
   ``--accelerator``; a recipe without that block is refused, never run on another block);
2. the checkpoints are given pod paths: each must lie in the model's directory (its
   ``model_dir``, else the main checkpoint's directory) and becomes
   ``<mount>/<path relative to it>``; the model's volumes (read-only) are each checkpoint
   file (or bundle directory) itself as a ``hostPath`` (one host; never the directory
   around it, :mod:`lemonpack.kube.admitted`), or a PersistentVolumeClaim holding the same
   relative paths, or an OCI model artifact mounted as an ``image`` volume (Kubernetes
   1.31+, "image volumes"), or an ``emptyDir`` an init container fills from a modelcar image
   (:func:`init_containers`, for clusters without image volumes). A model registered by
   ``oci://`` (``KubeModel.artifact_files``) has no file here: its checkpoints are
   ``<mount>/<file name in the artifact>``, its memory request the estimate from its GGUF
   header (``KubeModel.artifact_memory``), and ``hostpath`` is refused for it;
3. the launch plan is built by the runtime (:func:`lemonpack.runtime.launch.build.build_launch_plan`)
   for the target's host facts, with ``{port}`` = the container port, ``{host}`` = ``0.0.0.0``,
   ``{model_dir}`` and ``{hf_cache}`` = the mount, no parent environment (``{env:X:-D}`` takes
   its default: the pod does not run in this shell), the variant_of binary under
   ``/opt/lemonpack/<recipe>/`` (where ``lemonpack build`` puts it in the image) and no check
   of this machine's files;
4. the plan becomes a container (:mod:`lemonpack.kube.pod`);
5. ``health_probe`` becomes three probes on the container port, by number (podman before
   4.6 does not resolve a named probe port, containers/podman#18645): a ``startupProbe``
   polling every ``poll_interval_ms`` (rounded up to whole seconds) for ``timeout_seconds``
   (``failureThreshold`` = the budget over the period), a ``readinessProbe`` at the same
   period, a ``livenessProbe`` every 10 s (3 failures) once started; each attempt may take
   :data:`PROBE_TIMEOUT_SECONDS` (at least the period: a loaded engine answers late, and
   KServe's runtimes allow 15 s); ``http`` probes GET the endpoint (Kubernetes counts
   200-399 as success, so an ``expected_status`` outside it is refused), ``tcp`` probes
   connect, ``process`` has no probe (the container running is all). Without a
   ``livenessProbe`` when ``GenerateOptions.liveness`` is False (the CLI's default with
   ``--publish``): ``podman kube play`` (4.3) turns a livenessProbe into a healthcheck run
   *inside the image* (``curl`` for httpGet, ``nc`` for tcpSocket, through ``/bin/sh``) and
   restarts the container when it fails, and engine images hold neither tool; the kubelet
   runs probes itself, so a cluster file keeps all three. ``GenerateOptions.probe_exec`` (the
   CLI's ``--probe-exec``, an argv with ``{port}`` the container port) makes the
   ``livenessProbe`` an ``exec`` of that argv instead, in every variant (with ``--publish``
   it is then there by default): for images that carry a tool (``curl``, busybox ``wget``),
   it is what ``podman healthcheck run`` really checks. podman 4.3 runs it as ``/bin/sh -c
   'WORDS || exit 1'`` (measured), so the image needs ``/bin/sh`` too, and the words are
   shell-inert (:func:`lemonpack.kube.inputs.parse_probe_exec`); a ``process`` probe's
   liveness exec waits the startup budget (``initialDelaySeconds``), as there is no
   startupProbe to wait for;
6. the target gives resource limits and node affinity (:mod:`lemonpack.kube.accelerators`),
   and with a device the NoSchedule toleration and the ``Recreate`` strategy; every pod gets
   cpu/memory requests, a memory limit and the Pod Security "restricted" security context
   (:mod:`lemonpack.kube.admitted`);
7. ``--publish HOST:PORT`` gives the container port a ``hostIP``/``hostPort`` (the first
   model in name order gets PORT, the next PORT+1 ...): what ``podman kube play`` and
   single-node clusters publish on.

Names: :func:`lemonpack.kube.names.object_name`; two models with the same object name are
refused. Labels on both objects and the pods: ``app.kubernetes.io/name`` (the object name),
``app.kubernetes.io/managed-by: lemonpack``, ``dev.lemonpack.recipe``, ``dev.lemonpack.model``
(the model name when it is a valid label value, else its slug); the exact model name is also
the annotation ``dev.lemonpack.model``, and ``dev.lemonpack.recipe-digest`` is the sha256 of the
recipe's canonical JSON (the bytes ``lemonpack build`` packages into the image), so an object
names the exact recipe it was generated from.

Deterministic: models are emitted in object-name order, mappings are serialised with sorted
keys in block style (:mod:`lemonpack.kube.yamlout`), nothing depends on the clock, the caller's environment or the
order of the inputs. Errors: :class:`KubeError`, one line naming the model and the field;
:func:`generate` checks every model before returning anything.
"""

from __future__ import annotations

import math
import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from lightkube.models import apps_v1, core_v1, meta_v1

from lemonpack.contract.model import Recipe
from lemonpack.digest import Digest
from lemonpack.errors import LemonpackError
from lemonpack.kube.accelerators import Target
from lemonpack.kube.admitted import (TMP_VOLUME, container_security, host_mounts, memory_bytes, pod_security,
                                     resources, tolerations)
from lemonpack.kube.names import NameMappingError, label_value, object_name
from lemonpack.kube.pod import PodContainer, container_for
from lemonpack.kube.yamlout import dump_all
from lemonpack.oci.reference import check_pinned
from lemonpack.runtime.launch.build import build_launch_plan
from lemonpack.runtime.launch.modelfiles import ModelSpec
from lemonpack.safetree import inside

MANAGED_BY = "lemonpack"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_RECIPE = "dev.lemonpack.recipe"
LABEL_MODEL = "dev.lemonpack.model"
#: Annotation: the sha256 of the recipe's canonical JSON (the bytes ``lemonpack build`` packages).
ANNOTATION_RECIPE_DIGEST = "dev.lemonpack.recipe-digest"
#: Where an image built by ``lemonpack build`` holds a variant_of recipe's artifact.
IMAGE_PREFIX = "/opt/lemonpack"
CONTAINER_NAME = "engine"
PORT_NAME = "http"
MODEL_VOLUME = "model"
LIVENESS_PERIOD_SECONDS = 10
#: The least time one probe attempt may take (KServe's vLLM runtime: 15 s).
PROBE_TIMEOUT_SECONDS = 15


class KubeError(LemonpackError):
    """Bad input for ``kube generate``: one line naming the model and the field."""

    kind = "kube"


@dataclass(frozen=True)
class ModelSource:
    """Where a pod gets the model: ``kind`` ``hostpath`` (the model's own files on the node),
    ``pvc`` (``claim``: a PersistentVolumeClaim holding the files at the same relative paths)
    or ``oci`` (``reference``: an OCI model artifact pinned by digest, mounted as an image
    volume)."""

    kind: str = "hostpath"
    claim: str | None = None
    reference: str | None = None

    @classmethod
    def parse(cls, text: str) -> "ModelSource":
        """Read ``hostpath``, ``pvc:CLAIM``, ``oci:REF@sha256:DIGEST`` or
        ``modelcar:REF@sha256:DIGEST`` (a runnable modelcar image, ``lemonpack models push
        --modelcar``: an init container copies its ``/models`` into the pod, for clusters
        without image volumes). Raises :class:`KubeError` naming ``--models`` otherwise (an
        unpinned reference included)."""
        from lemonpack.kube.names import valid_namespace

        if text == "hostpath":
            return cls()
        kind, sep, rest = text.partition(":")
        if kind == "pvc" and sep:
            if not valid_namespace(rest):  # a claim name is an RFC 1123 label like a namespace
                raise KubeError(f"--models {text}: {rest!r} is not a PersistentVolumeClaim name ([a-z0-9-])")
            return cls("pvc", claim=rest)
        if kind in ("oci", "modelcar") and sep:
            why = check_pinned(rest)
            if why:
                raise KubeError(f"--models {text}: {why}")
            return cls(kind, reference=rest)
        raise KubeError(f"--models {text!r}: expected hostpath, pvc:CLAIM, oci:REF@sha256:DIGEST or "
                        "modelcar:REF@sha256:DIGEST")


@dataclass(frozen=True)
class KubeModel:
    """One model to serve: ``name`` as the user knows it (``user.qwen`` or a file's stem),
    ``spec`` its checkpoints on this machine, ``recipe`` the recipe serving it, ``source``
    where the pod gets it from."""

    name: str
    spec: ModelSpec
    recipe: Recipe
    source: ModelSource = field(default_factory=ModelSource)
    #: For a model registered by ``oci://``: checkpoint name -> the file's name in the artifact
    #: (its annotated title, what an image volume and a modelcar's ``/models`` show).
    artifact_files: Mapping[str, str] | None = None
    #: For a model registered by ``oci://``: the memory estimate read from its GGUF header.
    artifact_memory: int | None = None


@dataclass(frozen=True)
class GenerateOptions:
    """``images`` recipe id -> pinned image; ``target`` the accelerator; ``namespace`` (None:
    none written); ``replicas``; ``publish`` ``(host IP, first port)`` or None;
    ``container_port`` what ``{port}`` resolves to; ``mount`` where the model volume is
    mounted; ``liveness`` whether pods get a livenessProbe (module docstring, step 5);
    ``probe_exec`` the argv of an ``exec`` livenessProbe (``{port}``: the container port;
    None: the health_probe's action);
    ``trust`` the :class:`~lemonpack.trust.check.Trust` every image is judged with
    (``--policy``/``--registries.d``; None: the default places)."""

    images: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    target: Target = field(default_factory=lambda: Target("cpu"))
    namespace: str | None = None
    replicas: int = 1
    publish: tuple[str, int] | None = None
    container_port: int = 8080
    mount: str = "/models"
    liveness: bool = True
    trust: Any = None
    probe_exec: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Generated:
    """One model's objects: the lightkube ``deployment`` and ``service``, the ``container``
    description, ``name`` (the object name), the startup budget and ``memory`` (the bytes
    requested; None: the model is not on this machine, no memory request)."""

    name: str
    model: KubeModel
    container: PodContainer
    deployment: apps_v1.Deployment
    service: core_v1.Service
    startup_budget_seconds: int
    memory: int | None = None


# ----------------------------------------------------------------------------- per model

def _fail(model: str, text: str) -> KubeError:
    return KubeError(f"model {model}: {text}")


def pod_checkpoints(model: KubeModel, mount: str) -> tuple[ModelSpec, str, dict[str, str]]:
    """``(spec with pod paths, the model directory on this machine, {checkpoint: its
    absolute path on this machine})``: every checkpoint as ``<mount>/<path relative to the
    model directory>``. Raises :class:`KubeError` for a hub reference, a relative path
    without a model directory, or a checkpoint outside it."""
    spec = model.spec
    if model.artifact_files is not None:  # registered by oci://: the artifact's files, by their names
        pod = {name: posixpath.join(mount, model.artifact_files[name]) if name in model.artifact_files else path
               for name, path in spec.checkpoints.items()}
        local_names = [n for n, p in pod.items() if not p.startswith(mount + "/")]
        if local_names:
            raise _fail(model.name, f"checkpoints.{local_names[0]}: {spec.checkpoints[local_names[0]]!r} is not in "
                                    "the model's OCI artifact; register every checkpoint of an oci:// model from it")
        return (ModelSpec(name=spec.name, checkpoints=MappingProxyType(pod), recipe_options=spec.recipe_options,
                          mode=spec.mode, model_dir=mount), mount, {})
    main = spec.checkpoints.get("main") or (next(iter(spec.checkpoints.values())) if spec.checkpoints else None)
    if main is None:
        raise _fail(model.name, "checkpoints: the model has no checkpoint")
    if spec.model_dir is not None:
        local_dir = os.path.normpath(spec.model_dir)
    elif os.path.isabs(main):
        local_dir = os.path.dirname(os.path.normpath(main))
    else:
        raise _fail(model.name, f"checkpoints.main: {main!r} is not a local path; lemonpack does not download "
                                "model weights: register the downloaded file")
    out: dict[str, str] = {}
    local: dict[str, str] = {}
    for name, path in spec.checkpoints.items():
        if not os.path.isabs(path):
            if ":" in path:
                raise _fail(model.name, f"checkpoints.{name}: {path!r} is a hub reference; lemonpack does not "
                                        "download model weights: register the downloaded file")
            path = os.path.join(local_dir, path)
        norm = os.path.normpath(path)
        if norm == local_dir or not inside(norm, local_dir):
            raise _fail(model.name, f"checkpoints.{name}: {path} is not inside the model directory {local_dir}")
        rel = os.path.relpath(norm, local_dir)
        out[name] = posixpath.join(mount, *rel.split(os.sep))
        local[name] = norm
    pod_spec = ModelSpec(name=spec.name, checkpoints=MappingProxyType(out), recipe_options=spec.recipe_options,
                         mode=spec.mode, model_dir=mount)
    return pod_spec, local_dir, local


def _exec_liveness(argv: Sequence[str], port: int, delay: int) -> core_v1.Probe:
    """The ``exec`` livenessProbe of ``argv`` (``{port}`` -> ``port``), ``delay`` seconds
    before its first run (0: none written)."""
    command = [w.replace("{port}", str(port)) for w in argv]
    return core_v1.Probe(exec=core_v1.ExecAction(command=command), periodSeconds=LIVENESS_PERIOD_SECONDS,
                         failureThreshold=3, timeoutSeconds=max(PROBE_TIMEOUT_SECONDS, LIVENESS_PERIOD_SECONDS),
                         initialDelaySeconds=delay or None)


def _probes(probe, period_ms: int, timeout_s: int, port: int,
            probe_exec: Sequence[str] | None = None) -> tuple[Any, Any, Any, int]:
    period = max(1, math.ceil(period_ms / 1000))
    budget = max(period, int(timeout_s))
    if probe.type == "process":
        return None, None, _exec_liveness(probe_exec, port, budget) if probe_exec else None, budget
    action: dict[str, Any]
    if probe.type == "http":
        action = {"httpGet": core_v1.HTTPGetAction(port=port, path=probe.endpoint)}
    else:
        action = {"tcpSocket": core_v1.TCPSocketAction(port=port)}
    attempt = max(PROBE_TIMEOUT_SECONDS, period)
    startup = core_v1.Probe(periodSeconds=period, failureThreshold=max(1, math.ceil(budget / period)),
                            timeoutSeconds=attempt, **action)
    ready = core_v1.Probe(periodSeconds=period, failureThreshold=3, timeoutSeconds=attempt, **action)
    live = core_v1.Probe(periodSeconds=LIVENESS_PERIOD_SECONDS, failureThreshold=3,
                         timeoutSeconds=max(PROBE_TIMEOUT_SECONDS, LIVENESS_PERIOD_SECONDS), **action)
    if probe_exec:
        live = _exec_liveness(probe_exec, port, 0)
    return startup, ready, live, budget


#: Where a modelcar image holds the model's files (KServe's modelcar convention).
MODELCAR_DIR = "/models"
#: Where the init container of a ``modelcar`` source sees the pod's model volume.
MODELCAR_COPY = "/lemonpack-model"


def init_containers(model: KubeModel) -> list[core_v1.Container] | None:
    """A ``modelcar`` source's init container (None for the other sources): the modelcar
    image, pinned by digest, copies its :data:`MODELCAR_DIR` into the pod's model volume (an
    ``emptyDir``) with its own ``cp`` (busybox's or coreutils', from the modelcar's base),
    under the same "restricted" security context as the engine and a small cpu/memory
    request and limit. What clusters without image volumes (Kubernetes before 1.31, podman
    before 5) run; the model is then copied once per pod start."""
    if model.source.kind != "modelcar":
        return None
    small = {"cpu": "100m", "memory": "64Mi"}
    return [core_v1.Container(
        name="model", image=model.source.reference, imagePullPolicy="IfNotPresent",
        command=["cp", "-R", f"{MODELCAR_DIR}/.", f"{MODELCAR_COPY}/"],
        resources=core_v1.ResourceRequirements(requests=small, limits={"memory": small["memory"]}),
        securityContext=container_security(),
        volumeMounts=[core_v1.VolumeMount(name=MODEL_VOLUME, mountPath=MODELCAR_COPY)])]


def _volumes(model: KubeModel, local: dict[str, str], local_dir: str,
             mount: str) -> tuple[list[core_v1.Volume], list[core_v1.VolumeMount]]:
    """The model's volumes and their mounts in the container (module docstring, step 2)."""
    src = model.source
    if src.kind == "modelcar":
        return ([core_v1.Volume(name=MODEL_VOLUME, emptyDir=core_v1.EmptyDirVolumeSource())],
                [core_v1.VolumeMount(name=MODEL_VOLUME, mountPath=mount, readOnly=True)])
    if src.kind in ("pvc", "oci"):
        if src.kind == "pvc":
            assert src.claim is not None, "ModelSource.parse gives a pvc source its claim"
            vol = core_v1.Volume(name=MODEL_VOLUME, persistentVolumeClaim=core_v1.PersistentVolumeClaimVolumeSource(
                claimName=src.claim, readOnly=True))
        else:
            vol = core_v1.Volume(name=MODEL_VOLUME, image=core_v1.ImageVolumeSource(
                reference=src.reference, pullPolicy="IfNotPresent"))
        return [vol], [core_v1.VolumeMount(name=MODEL_VOLUME, mountPath=mount, readOnly=True)]
    mounts = host_mounts(local, local_dir, mount)
    names = [MODEL_VOLUME] if len(mounts) == 1 else [f"{MODEL_VOLUME}-{i}" for i in range(1, len(mounts) + 1)]
    vols = [core_v1.Volume(name=n, hostPath=core_v1.HostPathVolumeSource(path=m.host, type=m.kind))
            for n, m in zip(names, mounts)]
    return vols, [core_v1.VolumeMount(name=n, mountPath=m.pod, readOnly=True) for n, m in zip(names, mounts)]


def _affinity(target: Target) -> core_v1.Affinity | None:
    reqs = target.node_selector_requirements()
    if not reqs:
        return None
    exprs = [core_v1.NodeSelectorRequirement(key=k, operator="In", values=[v]) for k, v in reqs]
    return core_v1.Affinity(nodeAffinity=core_v1.NodeAffinity(
        requiredDuringSchedulingIgnoredDuringExecution=core_v1.NodeSelector(
            nodeSelectorTerms=[core_v1.NodeSelectorTerm(matchExpressions=exprs)])))


def generate_one(model: KubeModel, opts: GenerateOptions, *, host_port: int | None = None) -> Generated:
    """The objects of one model (module docstring, steps 1 to 7); ``host_port`` the port to
    publish it on (with ``opts.publish``). Raises :class:`KubeError`."""
    recipe, target = model.recipe, opts.target
    try:
        name = object_name(model.name)
        model_label = label_value(model.name)
        recipe_label = label_value(recipe.recipe)
    except NameMappingError as e:
        raise _fail(model.name, f"name: {e}") from None
    blocks = recipe.platforms.get("linux", {})
    if target.accelerator not in blocks:
        raise _fail(model.name, f"{recipe.file}: platforms.linux.{target.accelerator}: recipe {recipe.recipe!r} has "
                                f"no block for the target accelerator (it has: {', '.join(blocks) or 'none'})")
    if model.artifact_files is not None and model.source.kind == "hostpath":
        raise _fail(model.name, "--models hostpath: the model is registered by oci:// and has no file on this "
                                "machine to mount; use the default (an image volume of the artifact), "
                                "modelcar:REF@sha256:DIGEST or pvc:CLAIM")
    pod_spec, local_dir, local = pod_checkpoints(model, opts.mount)
    try:
        plan = build_launch_plan(
            recipe, pod_spec, target.host_facts(), device=target.accelerator, port=opts.container_port,
            host_addr="0.0.0.0", cache_root="/var/cache/lemonpack", environ={"HF_HUB_CACHE": opts.mount},
            external_dir=f"{IMAGE_PREFIX}/{recipe.recipe}", check_files=False)
    except LemonpackError as e:
        raise _fail(model.name, str(e)) from None
    where = f"{recipe.file}: {plan.platform_path}"
    try:
        c = container_for(plan, opts.images.get(recipe.recipe), where=where, model_dir=opts.mount,
                          port=opts.container_port)
    except LemonpackError as e:
        raise _fail(model.name, str(e)) from None
    probe = plan.health_probe
    if probe.type == "http" and not 200 <= probe.expected_status <= 399:
        raise _fail(model.name, f"{recipe.file}: health_probe.expected_status: {probe.expected_status} is outside "
                                "200-399, what a Kubernetes http probe counts as success")
    startup, ready, live, budget = _probes(probe, probe.poll_interval_ms, probe.timeout_seconds, c.port,
                                         opts.probe_exec)
    if not opts.liveness:
        live = None
    if model.artifact_files is not None:
        memory = model.artifact_memory
    else:
        main = local.get("main") or next(iter(local.values()))
        try:
            memory = memory_bytes(recipe, model.spec, main, list(local.values()))
        except LemonpackError as e:
            raise _fail(model.name, str(e)) from None

    labels = {LABEL_NAME: name, LABEL_MANAGED_BY: MANAGED_BY, LABEL_RECIPE: recipe_label, LABEL_MODEL: model_label}
    selector = {LABEL_NAME: name, LABEL_MANAGED_BY: MANAGED_BY}
    annotations = {LABEL_MODEL: model.name,
                   ANNOTATION_RECIPE_DIGEST: str(Digest.of_bytes(recipe.canonical))}
    port = core_v1.ContainerPort(name=PORT_NAME, containerPort=c.port, protocol="TCP")
    if opts.publish is not None and host_port is not None:
        port = core_v1.ContainerPort(name=PORT_NAME, containerPort=c.port, protocol="TCP",
                                     hostIP=opts.publish[0], hostPort=host_port)
    volumes, mounts = _volumes(model, local, local_dir, c.model_mount)
    volumes.append(core_v1.Volume(name=TMP_VOLUME, emptyDir=core_v1.EmptyDirVolumeSource()))
    mounts.append(core_v1.VolumeMount(name=TMP_VOLUME, mountPath="/tmp"))
    container = core_v1.Container(
        name=CONTAINER_NAME, image=c.image, imagePullPolicy="IfNotPresent",
        command=list(c.command) if c.command is not None else None, args=list(c.args) or None,
        env=[core_v1.EnvVar(name=k, value=v) for k, v in c.env] or None, workingDir=c.working_dir,
        ports=[port], startupProbe=startup, readinessProbe=ready, livenessProbe=live,
        resources=resources(target, memory), securityContext=container_security(), volumeMounts=mounts,
    )
    pod = core_v1.PodSpec(containers=[container], initContainers=init_containers(model), volumes=volumes,
                          affinity=_affinity(target),
                          securityContext=pod_security(), automountServiceAccountToken=False,
                          tolerations=tolerations(target))
    meta = meta_v1.ObjectMeta(name=name, namespace=opts.namespace, labels=labels, annotations=annotations)
    deployment = apps_v1.Deployment(
        apiVersion="apps/v1", kind="Deployment", metadata=meta,
        spec=apps_v1.DeploymentSpec(
            replicas=opts.replicas, selector=meta_v1.LabelSelector(matchLabels=selector),
            strategy=apps_v1.DeploymentStrategy(type="Recreate") if target.vendor else None,
            template=core_v1.PodTemplateSpec(metadata=meta_v1.ObjectMeta(labels=labels, annotations=annotations),
                                             spec=pod)))
    service = core_v1.Service(
        apiVersion="v1", kind="Service", metadata=meta,
        spec=core_v1.ServiceSpec(selector=selector, ports=[core_v1.ServicePort(
            name=PORT_NAME, port=c.port, targetPort=PORT_NAME, protocol="TCP")]))
    return Generated(name, model, c, deployment, service, budget, memory)


# ----------------------------------------------------------------------------- all models

def generate_objects(models: Sequence[KubeModel], opts: GenerateOptions) -> list[Generated]:
    """Every model's objects, in object-name order (module docstring). Checks the options
    (``replicas`` >= 1, a pinned image per ``images`` entry, the publish port range) and that
    no two models share an object name, then each model, then every image against the trust
    policy (:func:`check_trusted`). Raises :class:`KubeError` (or
    :class:`~lemonpack.errors.TrustError`) at the first problem; nothing is returned partly."""
    if opts.replicas < 1:
        raise KubeError(f"--replicas {opts.replicas}: must be at least 1")
    for rid, image in sorted(opts.images.items()):
        why = check_pinned(image)
        if why:
            raise KubeError(f"--image {rid}={image}: {why}")
    named: dict[str, KubeModel] = {}
    for m in models:
        try:
            n = object_name(m.name)
        except NameMappingError as e:
            raise _fail(m.name, f"name: {e}") from None
        if n in named:
            if named[n].name == m.name:
                raise _fail(m.name, "given twice")
            raise _fail(m.name, f"name: maps to the Kubernetes name {n!r}, as model {named[n].name} does; "
                                "rename one of them")
        named[n] = m
    if opts.publish is not None:
        last = opts.publish[1] + len(named) - 1
        if last > 65535:
            raise KubeError(f"--publish {opts.publish[0]}:{opts.publish[1]}: {len(named)} models need ports up to "
                            f"{last}, beyond 65535")
    out = []
    for i, n in enumerate(sorted(named)):
        host_port = opts.publish[1] + i if opts.publish is not None else None
        out.append(generate_one(named[n], opts, host_port=host_port))
    check_trusted(out, opts.trust)
    return out


def image_references(generated: Sequence[Generated]) -> list[tuple[str, str]]:
    """``[(model, image)]``: every image the objects name (each engine image, each OCI model
    artifact), in object order."""
    return [(g.model.name, img) for g in generated
            for img in (g.container.image, g.model.source.reference if g.model.source.kind == "oci" else None)
            if img]


def check_trusted(generated: Sequence[Generated], trust=None) -> None:
    """Judge every registry image the objects name (:func:`image_references`) with the trust
    policy (:class:`lemonpack.trust.check.Trust`, default: the containers-policy.json podman
    would read), so the file hands on nothing the policy rejects. The images are pinned by
    digest: the digest judged is the one written. Raises
    :class:`~lemonpack.errors.TrustError` (exit 3, nothing written)."""
    from lemonpack.trust.check import Trust

    images = image_references(generated)
    if not images:
        return
    trust = trust if trust is not None else Trust.load()
    for model, image in images:
        trust.enforce_image(image, use=f"kube generate: model {model}")


def documents(generated: Sequence[Generated]) -> list[dict[str, Any]]:
    """The objects as plain JSON-shaped documents: per model its Deployment, then its Service."""
    out: list[dict[str, Any]] = []
    for g in generated:
        out.append(g.deployment.to_dict())
        out.append(g.service.to_dict())
    return out


def generate(models: Sequence[KubeModel], opts: GenerateOptions) -> list[dict[str, Any]]:
    """:func:`generate_objects` as documents (:func:`documents`). Raises :class:`KubeError`."""
    return documents(generate_objects(models, opts))


HEADER = "# Generated by `lemonpack kube generate`: a Deployment and a Service per model.\n"

def render_yaml(docs: Sequence[Mapping[str, Any]]) -> bytes:
    """A multi-document YAML stream of ``docs``: a comment line, then each document after
    ``---``, keys sorted, block style, UTF-8 (:mod:`lemonpack.kube.yamlout`, read back by
    PyYAML in the tests). The same documents give the same bytes."""
    return (HEADER + dump_all(docs)).encode("utf-8")


__all__ = ["MODELCAR_COPY", "MODELCAR_DIR", "GenerateOptions", "Generated", "KubeError", "KubeModel", "ModelSource",
           "check_trusted", "documents", "generate", "generate_objects", "generate_one", "image_references",
           "init_containers", "pod_checkpoints", "render_yaml"]
