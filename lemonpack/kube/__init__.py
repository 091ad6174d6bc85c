"""Kubernetes objects and systemd units from recipes and registered models (``lemonpack kube``).

Public surface: :func:`generate` / :func:`generate_objects` (models to Deployments and
Services), :func:`render_yaml` (a deterministic YAML stream), :class:`Target` (the
accelerator the pods run on), :class:`ModelSource` (hostPath, PersistentVolumeClaim, OCI
image volume, or a modelcar image copied in by an init container), :func:`resolve_models` (model names and files to :class:`KubeModel` s, with
the model registry, discovery and the backend selector) and :func:`systemd_units` (the
podman-kube@ drop-in and quadlet ``.kube`` file that start the engines with the host).
"""

from lemonpack.kube.accelerators import Target, TargetError
from lemonpack.kube.generate import (GenerateOptions, Generated, KubeError, KubeModel, ModelSource, documents, generate,
                                     generate_objects, render_yaml)
from lemonpack.kube.inputs import parse_images, parse_publish, resolve_models
from lemonpack.kube.systemd import SystemdUnits, systemd_escape_path, systemd_units

__all__ = ["GenerateOptions", "Generated", "KubeError", "KubeModel", "ModelSource", "SystemdUnits", "Target",
           "TargetError", "documents", "generate", "generate_objects", "parse_images", "parse_publish", "render_yaml",
           "resolve_models", "systemd_escape_path", "systemd_units"]
