"""One release image into an OCI layout, from inputs already gathered.

:func:`write_image` takes an :class:`ImageInputs` (the definition, the selected
extensions' directories, the generated files, the lock's bytes, the recipe payloads) and
writes, through the project's one layout writer (:class:`lemonpack.oci.LayoutWriter`) and
deterministic layer writers (:mod:`lemonpack.oci.layer`):

- one layer per extension: its directory under ``opt/gufo/extensions/<name>/`` (registry
  order), so images sharing an extension share the layer blob;
- one layer with ``opt/gufo/generated/{extensions.json, gufo_ext_registry.cpp,
  gufo_ext_constants.hpp}`` and ``opt/gufo/extensions.lock`` (the lock's bytes as given);
- per recipe: its unpacked artifact under ``opt/lemonpack/<recipe>/`` (when it has one),
  then its canonical JSON at ``etc/lemonpack/recipes/<recipe>.json``;
- on a base, last, per architecture the gufo compiled for it under ``opt/gufo/``;
- per architecture an image config + manifest (``created`` = the epoch), and an image
  index over them in the definition's order.

Tags: ``<name>`` (the index) and ``<name>.<arch>`` (each manifest). Every file's mtime is
the epoch, owners 0, modes normalised, JSON canonical: same inputs, same digests.

Spec: OCI image-spec v1.1 ``image-index.md``, ``manifest.md``, ``config.md``,
``annotations.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from lemonpack.digest import Digest
from lemonpack.errors import UnsafeContentError
from lemonpack.oci import (ANNOTATION_TITLE, DEFAULT_COMPRESSLEVEL, MEDIA_TYPE_LAYER_TAR_GZIP, Descriptor, LayoutWriter,
                           write_dir_layer, write_files_layer)
from lemonpack.oci.mediatypes import ANNOTATION_CREATED
from lemonpack.oci.layout import rfc3339
from lemonpack.release.definition import ImageDefinition

if TYPE_CHECKING:
    from lemonpack.builder.baselayers import BaseLayers
    from lemonpack.oci.base import BaseSource

PREFIX = "opt/gufo"
GENERATED = ("extensions.json", "gufo_ext_registry.cpp", "gufo_ext_constants.hpp")
LABEL = "dev.lemonpack.release."
ANNOTATION_DESCRIPTION = "org.opencontainers.image.description"


@dataclass(frozen=True)
class ExtensionTree:
    """A selected extension: ``name``, ``version`` and its directory ``path``."""

    name: str
    version: str
    path: Path


@dataclass(frozen=True)
class RecipePayload:
    """A recipe going into the image: ``recipe`` id, ``canonical`` JSON bytes, ``tree``
    the unpacked, verified artifact directory (None: the recipe only), ``source`` URL and
    ``sha256`` (``sha256:<hex>``) of the artifact (None without one)."""

    recipe: str
    canonical: bytes
    tree: Path | None = None
    source: str | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class ImageInputs:
    """Everything one image holds. ``generated``: the three files of
    :data:`GENERATED` (name -> bytes, as ``lemonpack.extensions.generate.generate``
    returns them); ``lock``: the release lock's bytes; ``api_version``: ``0.M.R``;
    ``base``: the base image (None: ``scratch``); ``compiled``: per architecture the directory
    :func:`lemonpack.extensions.compile.compile_gufo` wrote for it (``bin/gufo-registry``,
    ``include/``, ``lib/``, ``share/``), shipped under ``/opt/gufo/`` of that architecture's
    image on a base; ``arch_recipes``: per architecture its payloads when they differ (None:
    ``recipes`` in every image)."""

    definition: ImageDefinition
    extensions: tuple[ExtensionTree, ...]
    generated: Mapping[str, bytes]
    lock: bytes
    api_version: str
    recipes: tuple[RecipePayload, ...] = ()
    base: "BaseSource | None" = None
    compiled: Mapping[str, Path] | None = None
    arch_recipes: Mapping[str, tuple[RecipePayload, ...]] | None = None

    def recipes_for(self, arch: str) -> tuple[RecipePayload, ...]:
        """The payloads of ``arch``'s image: ``arch_recipes[arch]`` (a recipe with per-CPU
        artifacts gives each architecture its own), else ``recipes``."""
        return (self.arch_recipes or {}).get(arch, self.recipes)


@dataclass(frozen=True)
class ImageResult:
    """What :func:`write_image` wrote: the ``index`` descriptor and ``manifests``
    (architecture -> manifest descriptor, in the definition's order)."""

    name: str
    index: Descriptor
    manifests: dict[str, Descriptor]


def _labels(inputs: ImageInputs, payloads: tuple[RecipePayload, ...]) -> dict[str, str]:
    d = inputs.definition
    labels = {
        LABEL + "image": d.name,
        LABEL + "api-version": inputs.api_version,
        LABEL + "features": ",".join(sorted(d.features)),
        LABEL + "extensions": ",".join(f"{e.name}@{e.version}" for e in inputs.extensions),
        LABEL + "lock": str(Digest.of_bytes(inputs.lock)),
    }
    recipes = ",".join(dict.fromkeys(f"{r.recipe}@{r.sha256}" if r.sha256 else r.recipe for r in payloads))
    if recipes:
        labels[LABEL + "recipes"] = recipes
    return labels


def _layers(lw: LayoutWriter, inputs: ImageInputs, epoch: int, level: int) -> list[Descriptor]:
    layers: list[Descriptor] = []
    for ext in inputs.extensions:
        prefix = f"{PREFIX}/extensions/{ext.name}"
        try:
            layers.append(lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP,
                                           partial(write_dir_layer, ext.path, prefix, mtime=epoch,
                                                   compresslevel=level),
                                           {ANNOTATION_TITLE: prefix}))
        except UnsafeContentError as exc:
            raise UnsafeContentError(f"extension {ext.name} ({ext.path}): {exc}") from None
    missing = [n for n in GENERATED if n not in inputs.generated]
    if missing:
        raise ValueError(f"generated files missing: {', '.join(missing)}")
    files = [(f"{PREFIX}/generated/{n}", bytes(inputs.generated[n]), 0o644) for n in GENERATED]
    files.append((f"{PREFIX}/extensions.lock", bytes(inputs.lock), 0o644))
    layers.append(lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP, lambda f: write_files_layer(
        files, f, mtime=epoch, compresslevel=level), {ANNOTATION_TITLE: f"{PREFIX}/generated"}))
    return layers


def _recipe_layers(lw: LayoutWriter, payloads: tuple[RecipePayload, ...], epoch: int, level: int) -> list[Descriptor]:
    layers: list[Descriptor] = []
    for r in payloads:
        if r.tree is not None:
            prefix = f"opt/lemonpack/{r.recipe}"
            try:
                layers.append(lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP, partial(
                    write_dir_layer, r.tree, prefix, mtime=epoch, compresslevel=level), {ANNOTATION_TITLE: prefix}))
            except UnsafeContentError as exc:
                raise UnsafeContentError(f"recipe {r.recipe}: artifact {r.source} ({r.sha256}): {exc}") from None
        path = f"etc/lemonpack/recipes/{r.recipe}.json"
        layers.append(lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP, partial(
            write_files_layer, [(path, r.canonical, 0o644)], mtime=epoch, compresslevel=level),
            {ANNOTATION_TITLE: path}))
    return layers


def write_image(lw: LayoutWriter, inputs: ImageInputs, *, epoch: int, compresslevel: int = DEFAULT_COMPRESSLEVEL,
                based: "BaseLayers | None" = None) -> ImageResult:
    """Write the image of ``inputs`` into the open layout ``lw`` and tag it; see the
    module docstring. ``epoch``: seconds since 1970 for every file mtime, the configs'
    ``created`` and the ``org.opencontainers.image.created`` annotations.

    With ``inputs.base`` (and ``based``, the layout's :class:`~lemonpack.builder.baselayers.BaseLayers`)
    each architecture's image starts with the base's layers for that platform, byte for
    byte, and ends with the gufo compiled for that architecture (``inputs.compiled[arch]``)
    under ``/opt/gufo/``;
    ``Entrypoint`` is ``/opt/gufo/bin/gufo-registry``, the config keeps the base's ``Env``.

    Returns :class:`ImageResult`. Raises :class:`~lemonpack.errors.UnsafeContentError`
    (a device, fifo, escaping symlink ... in an extension directory or an artifact,
    naming the path inside it; a base shadowing ``/opt/gufo`` or a recipe's directory),
    ``ValueError`` (a generated file missing), the base's errors
    (:mod:`lemonpack.oci.base`), ``OSError``.
    """
    d = inputs.definition
    common = _layers(lw, inputs, epoch, compresslevel)
    by_payloads: dict[tuple[RecipePayload, ...], list[Descriptor]] = {}
    for arch in d.architectures:  # each distinct set of payloads written once
        if inputs.recipes_for(arch) not in by_payloads:
            by_payloads[inputs.recipes_for(arch)] = _recipe_layers(lw, inputs.recipes_for(arch), epoch, compresslevel)
    compiled: dict[str, Descriptor] = {}
    if inputs.base is not None:
        if inputs.compiled is None or based is None or set(inputs.compiled) != set(d.architectures):
            raise ValueError("an image on a base needs gufo compiled for each architecture and the layout's "
                             "BaseLayers")
        for arch in d.architectures:
            compiled[arch] = lw.add_blob_file(MEDIA_TYPE_LAYER_TAR_GZIP, partial(
                write_dir_layer, inputs.compiled[arch], PREFIX, mtime=epoch, compresslevel=compresslevel),
                {ANNOTATION_TITLE: f"{PREFIX}/bin"})
        prefixes = (PREFIX, *(f"opt/lemonpack/{r.recipe}" for r in inputs.recipes if r.tree is not None))
    every = tuple(r for a in d.architectures for r in inputs.recipes_for(a))
    index_annotations = {**_labels(inputs, every), ANNOTATION_TITLE: d.name, ANNOTATION_CREATED: rfc3339(epoch)}
    if d.description:
        index_annotations[ANNOTATION_DESCRIPTION] = d.description
    manifests: dict[str, Descriptor] = {}
    tags: dict[str, Descriptor] = {}
    for arch in d.architectures:
        labels = _labels(inputs, inputs.recipes_for(arch))
        annotations = {**index_annotations, **labels}
        layers = common + by_payloads[inputs.recipes_for(arch)]
        gufo_env = f"GUFO_EXTENSIONS_JSON=/{PREFIX}/generated/extensions.json"
        if inputs.base is not None:
            image = inputs.base.for_platform("linux", arch, f"release image {d.name} ({d.file}, architectures)")
            assert based is not None, "checked with the base above"
            base_layers = based.put(image, prefixes)
            config = {"architecture": arch, "os": "linux",
                      "config": image.config_for(PREFIX, [f"/{PREFIX}/bin/gufo-registry"], labels,
                                                 path_dir=f"{PREFIX}/bin", extra_env=(gufo_env,))}
            if image.config.get("variant"):
                config["variant"] = image.config["variant"]
            history = image.history(len(layers) + 1, rfc3339(epoch), f"lemonpack release {d.name}")
            if history is not None:
                config["history"] = history
            desc = lw.add_image_manifest(config, [*base_layers, *layers, compiled[arch]],
                                         {**annotations, **image.annotations()}, created=epoch)
            manifests[arch] = desc
            tags[f"{d.name}.{arch}"] = desc
            continue
        config = {"architecture": arch, "os": "linux",
                  "config": {"Labels": labels, "WorkingDir": f"/{PREFIX}",
                             "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                     gufo_env]}}
        desc = lw.add_image_manifest(config, layers, annotations, created=epoch)
        manifests[arch] = desc
        tags[f"{d.name}.{arch}"] = desc
    index = lw.add_index(list(manifests.values()), index_annotations)
    tags[d.name] = index
    lw.set_tags(tags)
    return ImageResult(d.name, index, manifests)


__all__ = ["ExtensionTree", "RecipePayload", "ImageInputs", "ImageResult", "write_image", "GENERATED", "PREFIX"]
