"""``lemonpack kube generate``: Kubernetes objects (and systemd units) for registered models.

Every MODEL (a registered ``user.*`` model, or a model file served by the recipe the backend
selector picks) becomes a Deployment and a Service (:mod:`lemonpack.kube`). Output goes to
``--out FILE`` (written atomically) or ``-`` (stdout). Any bad input (an image by tag, a recipe
without a block for the accelerator, a recipe discovery rejected, an argv that resolves to a
shell script, a name Kubernetes cannot carry, a non-loopback ``--publish`` without
``--publish-any`` ...) is one line naming the model and the field, exit 1, and nothing is
written. ``--systemd DIR`` also writes a ``podman-kube@`` drop-in and a quadlet ``.kube`` file
there, so ``podman kube play`` starts the engines with the host. ``--probe-exec JSON-ARGV`` makes
the livenessProbe an exec of that argv (:mod:`lemonpack.kube.generate`, step 5). Every registry image is judged
by the trust policy first (``--policy FILE``/``--registries.d DIR``, else the default places:
exit 3, nothing written); ``--admission FILE`` writes the policy's rules for the cluster
(``--admission-format``: policy-controller ClusterImagePolicy objects, or a Kyverno
ClusterPolicy).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from lemonpack.cli._app import HELP_MARKUP, JSON_OPTION, POLICY_OPTION, REGISTRIES_D_OPTION, app, print_json

kube_app = typer.Typer(rich_markup_mode=HELP_MARKUP, no_args_is_help=True,
                       help="Serve models from Kubernetes (or podman kube play): objects generated from recipes.")
app.add_typer(kube_app, name="kube")


def _sources(values: list[str]):
    """``(default source, {model: source})`` from ``--models`` values (``SPEC`` or ``MODEL=SPEC``)."""
    from lemonpack.kube import KubeError, ModelSource

    default, per_model = None, {}
    for text in values:
        model, eq, spec = text.rpartition("=")
        if eq:
            per_model[model] = ModelSource.parse(spec)
        elif default is not None:
            raise KubeError(f"--models {text}: a default source is already given; name the model (MODEL={text})")
        else:
            default = ModelSource.parse(text)
    return default, per_model


@kube_app.command("generate")
def generate_cmd(
    models: list[str] = typer.Argument(..., metavar="MODEL...",
                                       help="Registered model names (user.*) or model files."),
    image: list[str] = typer.Option([], "--image", metavar="RECIPE=HOST/REPO@sha256:DIGEST",
                                    help="The engine image of a recipe, pinned by digest (repeatable). A recipe "
                                         "whose argv is a container run brings its own."),
    accelerator: str = typer.Option("cpu", "--accelerator", metavar="ACCEL[:ARCH]",
                                    help="What the pods run on: cpu, cuda:sm_90, rocm:gfx1151, vulkan:gfx1100, "
                                         "vulkan:intel, oneapi ... (selects the recipe block; gives resource limits "
                                         "and node affinity)."),
    models_from: list[str] = typer.Option([], "--models", metavar="[MODEL=]hostpath|pvc:CLAIM|oci:REF@sha256:D",
                                          help="Where pods get the model (default hostpath: the model's own files "
                                               "on the node, never their directory). Repeatable, per model with "
                                               "MODEL=."),
    publish: str | None = typer.Option(None, "--publish", metavar="HOST:PORT",
                                       help="Publish the engines on HOST:PORT, PORT+1 ... (hostIP/hostPort: podman "
                                            "kube play, single-node clusters). HOST must be loopback."),
    publish_any: bool = typer.Option(False, "--publish-any", help="Allow a --publish HOST that is not loopback."),
    namespace: str | None = typer.Option(None, "--namespace", "-n", help="Namespace written into the objects."),
    replicas: int = typer.Option(1, "--replicas", help="Pods per model (one GPU each)."),
    out: str = typer.Option(..., "--out", "-o", metavar="FILE|-", help="Where to write the YAML ('-': stdout)."),
    systemd: Path | None = typer.Option(None, "--systemd", metavar="DIR",
                                        help="Also write a podman-kube@ drop-in and a quadlet .kube file named "
                                             "after the models (lemonpack-NAME.kube) into DIR (needs --out FILE)."),
    liveness: bool | None = typer.Option(None, "--liveness/--no-liveness",
                                         help="Give the pods a livenessProbe (default: yes, but not with "
                                              "--publish: podman kube play runs it as curl inside the image "
                                              "and restarts an engine image without curl)."),
    probe_exec: str | None = typer.Option(None, "--probe-exec", metavar="JSON-ARGV",
                                          help="Make the livenessProbe an exec of this argv, a JSON list "
                                               "({port}: the container port), e.g. '[\"curl\", \"-fsS\", "
                                               "\"http://127.0.0.1:{port}/health\"]', for an image that "
                                               "carries the tool (and /bin/sh: podman 4.3 runs it through "
                                               "sh -c). Implies --liveness with --publish."),
    admission: Path | None = typer.Option(None, "--admission", metavar="FILE",
                                          help="Also write sigstore policy-controller ClusterImagePolicy objects "
                                               "for the file's images, from the trust policy's rules "
                                               "(containers-policy.json)."),
    admission_format: str = typer.Option("cluster-image-policy", "--admission-format",
                                         metavar="cluster-image-policy|kyverno",
                                         help="What --admission writes: policy-controller ClusterImagePolicy "
                                              "objects, or a Kyverno ClusterPolicy with verifyImages rules."),
    policy: Path | None = POLICY_OPTION,
    registries_d: Path | None = REGISTRIES_D_OPTION,
    json_out: bool = JSON_OPTION,
) -> int:
    """Write a Deployment and a Service per MODEL, from its recipe's launch plan."""
    from lemonpack.kube import (GenerateOptions, KubeError, Target, documents, generate_objects, parse_images,
                                parse_publish, render_yaml, resolve_models, systemd_units)
    from lemonpack.kube.inputs import check_outputs, parse_probe_exec, write_output
    from lemonpack.kube.names import valid_namespace
    from lemonpack.kube.systemd import check_quadlet_free, quadlet_name
    from lemonpack.runtime.recipes.discovery import Discovery
    from lemonpack.trust.check import Trust

    if namespace is not None and not valid_namespace(namespace):
        raise KubeError(f"--namespace {namespace!r}: not a namespace name ([a-z0-9-], at most 63 characters)")
    if admission is None and admission_format != "cluster-image-policy":
        raise KubeError(f"--admission-format {admission_format}: give --admission FILE, the file to write it to")
    if systemd is not None and out == "-":
        raise KubeError("--systemd: the units name the YAML file; give --out FILE, not -")
    probe_argv = parse_probe_exec(probe_exec)
    if probe_argv is not None and liveness is False:
        raise KubeError("--probe-exec with --no-liveness: the probe is the livenessProbe; give one of them")
    check_outputs(out, systemd)
    trust = Trust.named(policy, registries_d)  # a --policy that cannot be used: exit 3, nothing written
    target = Target.parse(accelerator)
    images = parse_images(image)
    pub = parse_publish(publish, any_address=publish_any)
    default_source, per_model = _sources(models_from)
    unknown = sorted(set(per_model) - set(models))
    if unknown:
        raise KubeError(f"--models {unknown[0]}=...: {unknown[0]} is not one of the MODEL arguments")
    resolved = resolve_models(models, target=target, images=images, discovered=Discovery().scan(),
                              sources=per_model, default_source=default_source)
    opts = GenerateOptions(images=images, target=target, namespace=namespace, replicas=replicas, publish=pub,
                           liveness=(pub is None or probe_argv is not None) if liveness is None else liveness,
                           trust=trust, probe_exec=probe_argv)
    generated = generate_objects(resolved, opts)
    data = render_yaml(documents(generated))
    admission_data = None
    if admission is not None:
        from lemonpack.kube.admission import admission_documents, render_admission

        admission_data = render_admission(admission_documents(generated, trust, admission_format), admission_format)
    units = None
    if systemd is not None:
        budget = max((g.startup_budget_seconds for g in generated), default=0)
        units = systemd_units(out, startup_budget_seconds=budget, name=quadlet_name(g.name for g in generated))
        check_quadlet_free(systemd / units.quadlet, out)
    # Everything is checked: now write (each file atomically).
    if out == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        write_output(out, data, "--out")
    written = [] if out == "-" else [os.path.abspath(out)]
    if admission is not None and admission_data is not None:
        write_output(str(admission), admission_data, "--admission")
        written.append(os.path.abspath(admission))
    if units is not None and systemd is not None:  # units are made only for --systemd
        for rel, text in units.files:
            path = systemd / rel
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise KubeError(f"--systemd {systemd}: cannot create {path.parent}: {e.strerror or e}") from None
            write_output(str(path), text.encode("utf-8"), "--systemd")
            written.append(str(path))
    summary = [{"model": g.model.name, "name": g.name, "recipe": g.model.recipe.recipe, "image": g.container.image,
                "port": g.container.port, "memory": g.memory} for g in generated]
    if json_out and out != "-":
        print_json({"written": written, "objects": summary,
                    "systemd": {"instance": units.instance, "quadlet": units.quadlet} if units else None})
        return 0
    # Plain writes: one line per model, and a thousand models should not wait on rich's renderer.
    lines = [f"{g.model.name}: Deployment and Service {g.name} ({g.model.recipe.recipe}, {g.container.image})"
             for g in generated]
    for g in generated:
        if g.memory is None:
            lines.append(f"warning: model {g.model.name}: its main file is not on this machine, so the pod has no "
                         "memory request (its size is unknown)")
        if pub is not None and g.model.source.kind == "oci":
            lines.append(f"warning: model {g.model.name}: an image volume, which podman kube play (4.x) does not "
                         "support; for one host use --models MODEL=modelcar:REF@sha256:... (models push --modelcar)")
    if pub is not None and replicas > 1:
        lines.append(f"warning: --publish with --replicas {replicas}: a node holds one pod per host port, so one "
                     "node (podman kube play, a single-node cluster) runs one replica of each model")
    if out != "-":
        lines.append(f"wrote {out}")
    if admission is not None:
        lines.append(f"wrote {admission}")
    if units is not None:
        lines.append(f"wrote {systemd}: enable with `systemctl daemon-reload && systemctl enable --now "
                     f"'{units.instance}'` (podman 4.3), or copy {units.quadlet} to /etc/containers/systemd/ "
                     "(podman 4.4+)")
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
    return 0


__all__ = ["generate_cmd"]
