"""Modelcar images: a model's files as a runnable container image, under ``/models``.

KServe's "modelcars" (``storageUri: oci://...``, kserve docs "Serving models with OCI images")
run a container image that holds the model under ``/models`` beside the serving runtime, and
the runtime reads the files through it; containerd clusters without image volumes can mount
only images. lemonpack's pods use the same image from an init container that copies
``/models`` into the pod (:func:`lemonpack.kube.generate.init_containers`), for clusters
without Kubernetes image volumes (before 1.31, podman before 5).

:func:`write_modelcar` writes one to a local OCI image layout, deterministically:

- the base's layers first, byte for byte (``base``: ``oci:DIR[:TAG]``, a local image layout
  read by :mod:`lemonpack.oci.base`, e.g. a busybox or distroless-with-shell image): a modelcar
  must be runnable, and KServe's sidecar runs ``sh -c "ln -sf /proc/$$/root/models /mnt/models
  && sleep infinity"`` and lemonpack's init container ``cp -R /models/. DEST/``, so the base
  must hold ``sh``/``ln``/``sleep`` or ``cp``; without a base the image holds the files only
  (mountable by an image volume, not runnable);
- then one layer per model file, ``models/<file name>`` (deterministic tar+gzip written by
  :func:`lemonpack.oci.layer.write_dir_layer` at gzip level 0: weights do not compress, and
  the bytes stay reproducible), in the order given; names are the files' base names
  (two files of one name are refused);
- a config with the base's ``Env``, ``User`` ``65532:65532`` (non-root: Pod Security
  "restricted", :data:`lemonpack.kube.admitted.RUN_AS_USER`'s value), ``WorkingDir``
  ``/models``, the label ``org.containers.type: ai.image.model.car`` (RamaLama's name for a
  model "car" image), ``created`` from ``SOURCE_DATE_EPOCH`` (0 without it) and the
  manifest annotations ``org.opencontainers.image.created`` and ``.title`` (the main file).

Same files, same base, same ``SOURCE_DATE_EPOCH``: same digest. :func:`push_modelcar` writes
the layout in a temporary directory and publishes it through the registry client
(:func:`lemonpack.registry.transfer.publish_layout`), returning the pinned reference.

Spec: OCI image-spec v1.1 ``manifest.md``, ``config.md``, ``layer.md``; KServe modelcar
convention (``/models``).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from lemonpack.errors import InputError, UnreadableFileError

if TYPE_CHECKING:
    from lemonpack.oci.layer import LayerInfo

#: Where a modelcar holds the model's files (KServe's convention).
MODELCAR_DIR = "models"
#: The uid:gid a modelcar runs as (the user lemonpack's pods run as).
MODELCAR_USER = "65532:65532"
#: The label RamaLama gives a model "car" image.
MODELCAR_LABEL = ("org.containers.type", "ai.image.model.car")


@dataclass(frozen=True)
class Modelcar:
    """A modelcar written: ``digest`` of its image manifest, ``files`` (base names, in layer
    order), ``base`` (the base's manifest digest, None without one); after a push,
    ``reference`` ``HOST/REPO:TAG@DIGEST``."""

    digest: str
    files: tuple[str, ...]
    base: str | None = None
    reference: str | None = None

    def to_json(self) -> dict:
        """``models push --modelcar --json``'s ``modelcar`` member."""
        return {"digest": self.digest, "files": list(self.files), "base": self.base, "reference": self.reference}


def _stage(path: Path, into: Path) -> None:
    """``path``'s bytes at ``into`` (a hard link when the file system allows, else a copy)."""
    try:
        os.link(path, into)
    except OSError:
        shutil.copyfile(path, into)


def _model_layer(stage: Path, out: BinaryIO, *, mtime: int) -> LayerInfo:
    """The layer of one staged model file: ``models/<name>``, gzip level 0 (module docstring)."""
    from lemonpack.oci.layer import write_dir_layer

    return write_dir_layer(stage, MODELCAR_DIR, out, mtime=mtime, compresslevel=0)


def write_modelcar(files: Sequence[str | os.PathLike[str]], layout: str | os.PathLike[str], *,
                   base: str | None = None, tag: str = "latest",
                   environ: Mapping[str, str] | None = None) -> Modelcar:
    """Write the modelcar of ``files`` (regular files: the model) to the OCI image layout
    ``layout`` under ``tag`` (module docstring); ``base``: ``oci:DIR[:TAG]`` (linux/amd64
    image). Returns :class:`Modelcar`. Raises :class:`InputError` (no file, two files of one
    name), :class:`UnreadableFileError` (a path that is no regular file), and what
    :func:`lemonpack.oci.base.open_base` and the layout writer raise."""
    from lemonpack.oci.base import open_base
    from lemonpack.oci.layout import LayoutWriter
    from lemonpack.oci.mediatypes import ANNOTATION_CREATED, ANNOTATION_TITLE, MEDIA_TYPE_LAYER_TAR_GZIP
    from lemonpack.oci.layout import rfc3339
    from lemonpack.sourcedate import source_date_epoch

    paths = [Path(f) for f in files]
    if not paths:
        raise InputError("a modelcar needs at least one model file")
    names = [p.name for p in paths]
    for p in paths:
        if not p.is_file():
            raise UnreadableFileError(f"{p}: not a regular file")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"two model files are named {dup[0]!r}: a modelcar holds them side by side in /models")
    epoch = source_date_epoch(environ)
    image = open_base(base).for_platform("linux", "amd64", "the modelcar") if base else None
    with LayoutWriter(layout) as lw, tempfile.TemporaryDirectory(prefix="lemonpack-modelcar-") as tmp:
        layers = []
        if image is not None:
            for desc, diff_id in zip(image.layers, image.diff_ids):
                layers.append(lw.copy_blob(image.blob(desc), desc, diff_id=diff_id))
        for i, p in enumerate(paths):
            stage = Path(tmp) / str(i)
            stage.mkdir()
            _stage(p, stage / p.name)
            layers.append(lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP, functools.partial(
                _model_layer, stage, mtime=epoch)))
        base_cfg = (image.config.get("config") or {}) if image is not None else {}
        env = [e for e in base_cfg.get("Env") or [] if isinstance(e, str)]
        labels = {**(base_cfg.get("Labels") or {}), MODELCAR_LABEL[0]: MODELCAR_LABEL[1]}
        run = {"User": MODELCAR_USER, "WorkingDir": f"/{MODELCAR_DIR}", "Labels": labels}
        if env:
            run["Env"] = env
        config = {"architecture": "amd64", "os": "linux", "config": run}
        annotations = {ANNOTATION_CREATED: rfc3339(epoch), ANNOTATION_TITLE: names[0]}
        if image is not None:
            annotations.update(image.annotations())
        desc = lw.add_image_manifest(config, layers, annotations, created=epoch)
        lw.set_tags({tag: desc})
    return Modelcar(desc.digest, tuple(names), image.digest if image is not None else None)


def modelcar_destination(to: str) -> str:
    """Where ``models push --modelcar`` puts the modelcar of an artifact pushed to ``to``
    (``[oci://]HOST/REPO[:TAG]``): the same repository, tag ``TAG-modelcar`` (``latest-modelcar``
    without a tag; a tag holds one manifest). Raises :class:`InputError` for a malformed
    reference or a tag too long to extend (128 characters)."""
    from lemonpack.oci.reference import InvalidReferenceError, parse_registry_reference

    try:
        dest = parse_registry_reference(to)
    except InvalidReferenceError as e:
        raise InputError(str(e)) from None
    tag = f"{dest.tag or 'latest'}-modelcar"
    if len(tag) > 128:
        raise InputError(f"--to {to}: the tag is too long to name its modelcar {tag[:20]}... (128 characters at most)")
    return f"{dest.name}:{tag}"


def push_modelcar(files: Sequence[str | os.PathLike[str]], to: str, *, base: str | None = None,
                  insecure: bool = False, registry_config: str | os.PathLike[str] | None = None,
                  progress: bool = False, environ: Mapping[str, str] | None = None) -> Modelcar:
    """Write the modelcar of ``files`` (:func:`write_modelcar`) and push it to ``to``
    (``[oci://]HOST[:PORT]/REPO[:TAG]``, tag default ``latest``; a digest is refused) through
    :func:`lemonpack.registry.transfer.publish_layout` (every blob hashed as it is sent).
    Returns :class:`Modelcar` with ``reference`` ``HOST/REPO:TAG@DIGEST``. Raises
    :class:`InputError` for a destination with a digest, what :func:`write_modelcar` raises
    and the registry client's errors (``FetchError``, ``IntegrityError``)."""
    from lemonpack.oci.reference import parse_registry_reference
    from lemonpack.registry.client import RegistryClient
    from lemonpack.registry.transfer import publish_layout

    dest = parse_registry_reference(to)
    if dest.digest:
        raise InputError(f"--to {to}: push to a tag or a repository, not a digest (the push makes the digest)")
    tag = dest.tag or "latest"
    with tempfile.TemporaryDirectory(prefix="lemonpack-modelcar-layout-") as tmp:
        layout = Path(tmp) / "layout"
        car = write_modelcar(files, layout, base=base, tag=tag, environ=environ)
        with RegistryClient(dest.host, insecure=insecure, registry_config=registry_config) as client:
            publish_layout(layout, dest.with_ref(tag=tag), client, tag=tag, progress=progress)
    return Modelcar(car.digest, car.files, car.base, f"{dest.name}:{tag}@{car.digest}")


__all__ = ["MODELCAR_DIR", "MODELCAR_LABEL", "MODELCAR_USER", "Modelcar", "modelcar_destination", "push_modelcar",
           "write_modelcar"]
