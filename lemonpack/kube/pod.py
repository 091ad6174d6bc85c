"""A launch plan as a pod's container: image, command, args, env, port, model mount.

The plan comes from the runtime (:func:`lemonpack.runtime.launch.build.build_launch_plan`, the same
code ``lemonpack run`` and ``serve`` use), resolved for the pod: ``{port}`` is the container
port, ``{host}`` is ``0.0.0.0``, ``{checkpoint:NAME}`` a path under the model volume's mount.
Two shapes:

- a plan that runs a program (a variant_of recipe's binary in its image under
  ``/opt/lemonpack/<recipe>/``, or a passthrough command): ``command`` is ``argv[0]``,
  ``args`` the rest, the image the one given for the recipe (``--image RECIPE=REF``);
- a passthrough plan whose argv is a container CLI's ``run`` (RFC section 13.2, read by
  :func:`lemonpack.oci.cmdline.read_container_argv`): the image is the argv's, the elements
  after it are the container's ``args`` (its entrypoint stays, as ``podman run`` keeps it),
  and the run options map to the pod: ``--entrypoint`` to ``command``, ``-e/--env K=V`` to
  ``env``, ``-w/--workdir`` to ``workingDir``, the ``-v/--volume`` or ``--mount type=bind``
  whose source is the model directory to the model volume's mount path, a ``-p/--publish``
  of ``{port}`` to the container port. Options about the host's runtime (``--rm``,
  ``--name``, ``--network``, ``--device``, ``--group-add``, ``--security-opt`` ...: the
  pod's resources and the cluster decide those) are dropped; any other option is refused,
  naming it, rather than silently lost.

Both shapes are checked with the execution policy lint applies to recipes
(:func:`lemonpack.oci.policy.argv_problems`), now on the resolved argv: no shell script
(``sh -c``), every image pinned by digest.
"""

from __future__ import annotations

import csv
import json
import posixpath
from dataclasses import dataclass

from lemonpack.errors import LemonpackError
from lemonpack.oci.cmdline import UnreadableCommandLine, read_container_argv
from lemonpack.oci.policy import argv_problems
from lemonpack.oci.reference import check_pinned
from lemonpack.runtime.launch.plan import LaunchPlan

#: ``run`` options that only concern the host's container runtime; a pod has its own
#: answer to each (network namespace, devices from resource limits, its own name).
HOST_ONLY_OPTIONS = frozenset({
    "rm", "name", "network", "net", "init", "device", "group-add", "security-opt", "detach", "interactive",
    "tty", "replace", "pull", "label", "ipc", "cap-add", "ulimit", "shm-size", "userns", "tz", "log-driver",
    "log-opt", "hostname", "pod", "annotation", "http-proxy", "quiet", "sig-proxy", "privileged",
})


class PodError(LemonpackError):
    """A plan that cannot become a pod container; the message names the field."""

    kind = "kube-pod"


@dataclass(frozen=True)
class PodContainer:
    """One engine container: ``image`` (pinned), ``command`` (None: the image's entrypoint),
    ``args``, ``env`` (sorted pairs), ``working_dir``, ``port`` the container port the engine
    listens on, ``model_mount`` where the model volume is mounted (read-only)."""

    image: str
    command: tuple[str, ...] | None
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    working_dir: str | None
    port: int
    model_mount: str


def _policy(argv: tuple[str, ...], where: str) -> None:
    problems = argv_problems("", where, ("command", "args"), argv[0], argv[1:]) if argv else []
    if problems:
        p = problems[0]
        raise PodError(f"{p.path}: {p.message} (resolved argv: {json.dumps(list(argv))})")


def _bind_source(value: str) -> tuple[str, str] | None:
    """``(source, destination)`` of a ``--mount type=bind`` value, None for another type."""
    try:
        fields = next(csv.reader([value]))
    except (csv.Error, StopIteration):
        return None
    kv = {k.strip().lower(): v for k, _, v in (f.partition("=") for f in fields)}
    if kv.get("type", "").lower() != "bind":
        return None
    src = kv.get("source") or kv.get("src")
    dst = kv.get("target") or kv.get("destination") or kv.get("dst")
    return (src, dst) if src and dst else None


def container_for(plan: LaunchPlan, image: str | None, *, where: str, model_dir: str, port: int) -> PodContainer:
    """The pod container of ``plan`` (module docstring). ``image`` is the image given for the
    recipe (None: none given); ``where`` the JSON path of the plan's block, for messages;
    ``model_dir`` the path the plan's ``{model_dir}`` resolved to (the model mount); ``port``
    the container port ``{port}`` resolved to.

    Raises :class:`PodError` naming the field: a shell script or an unpinned image in the
    resolved argv, a program plan without ``image``, a container run whose image differs from
    ``image``, a run option without a pod equivalent, an argv the container-line reader
    cannot read."""
    argv = tuple(plan.argv)
    _policy(argv, where)
    try:
        inv = read_container_argv(argv)
    except UnreadableCommandLine as e:  # pragma: no cover - argv_problems reports it first
        raise PodError(f"{where}.args: {e}") from None
    env = dict(plan.env)
    if inv is None:
        if image is None:
            raise PodError(f"--image: no image given for recipe {plan.recipe!r} "
                           f"(add --image {plan.recipe}=HOST/REPO@sha256:DIGEST)")
        why = check_pinned(image)
        if why:
            raise PodError(f"--image {plan.recipe}={image}: {why}")
        return PodContainer(image, (argv[0],), argv[1:], tuple(sorted(env.items())), plan.working_dir, port,
                            model_dir)
    if inv.subcommand != "run" or inv.image_index is None or inv.image is None:
        raise PodError(f"{where}.command: the argv runs `{inv.engine} {inv.subcommand}`, not a container run "
                       "a pod can hold")
    if image is not None and image != inv.image:
        raise PodError(f"--image {plan.recipe}={image}: the recipe's argv runs its own image {inv.image}; "
                       "drop --image for it")
    inner = argv[inv.image_index + 1:]
    if inner:
        _policy(inner, f"{where}.args (the container's command)")
    command: tuple[str, ...] | None = None
    working_dir = plan.working_dir
    mount = model_dir
    container_port = port
    for long, value in inv.options:
        if long in HOST_ONLY_OPTIONS:
            continue
        if long == "entrypoint" and value is not None:
            command = tuple(json.loads(value)) if value.startswith("[") else (value,)
        elif long == "env" and value is not None:
            key, eq, val = value.partition("=")
            if not eq:
                raise PodError(f"{where}.args: --env {key} takes {key} from the host's environment, which a pod "
                               "does not have; give KEY=VALUE")
            env[key] = val
        elif long == "workdir" and value is not None:
            working_dir = value
        elif long in ("volume", "mount") and value is not None:
            pair = tuple(value.split(":")[:2]) if long == "volume" else _bind_source(value)
            if not pair or len(pair) != 2 or posixpath.normpath(pair[0]) != posixpath.normpath(model_dir):
                raise PodError(f"{where}.args: --{long} {value} mounts something other than the model directory; "
                               "a pod gets only the model volume")
            mount = pair[1]
        elif long == "publish" and value is not None:
            parts = value.split("/")[0].split(":")
            if len(parts) >= 2 and parts[-2] == str(port) and parts[-1].isdigit():
                container_port = int(parts[-1])
        else:
            shown = f"--{long}" + (f" {value}" if value is not None else "")
            raise PodError(f"{where}.args: the container run option {shown} has no pod equivalent here")
    return PodContainer(inv.image, command, inner, tuple(sorted(env.items())), working_dir, container_port, mount)


__all__ = ["HOST_ONLY_OPTIONS", "PodContainer", "PodError", "container_for"]
