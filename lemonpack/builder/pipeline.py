"""``lemonpack build``: recipes → verified artifacts → one OCI image layout (+ Nix).

Input: validated recipes (:mod:`lemonpack.contract`) and :class:`BuildOptions`.
Output, in ``--out`` (an OCI image layout, image-spec v1.1 ``image-layout.md``):

- per target (OS × accelerator × arch override, :func:`lemonpack.contract.targets`):
  * a ``variant_of`` target with an artifact → an **image manifest**: layer 1 is the
    artifact, verified by sha256 while streaming and unpacked safely, under
    ``opt/lemonpack/<recipe>/``; layer 2 is the canonical recipe JSON at
    ``etc/lemonpack/recipes/<recipe>.json``; the config's Entrypoint is the binary. With a
    base (``BuildOptions.base``, :mod:`lemonpack.oci.base`) the base's layers for the
    target's platform come first, byte for byte (:class:`~lemonpack.builder.baselayers.BaseLayers`), the config keeps the
    base's ``Env``, and the manifest records ``org.opencontainers.image.base.*``; a
    passthrough target whose command is not a container CLI then becomes an image too
    (its Entrypoint: the command, found on the base's PATH);
  * any other target (passthrough, or a variant_of binary the user provides) → an
    **artifact manifest** (``artifactType`` :data:`RECIPE_ARTIFACT_TYPE`, empty config)
    whose one layer is the canonical recipe JSON and whose annotations record the
    digest-pinned container images of that target;
- one image index per recipe over its targets, tagged ``<recipe>``; one tag per target,
  ``<recipe>.<target>`` (e.g. ``llamacpp-per-platform.linux-rocm``);
- ``nix/<recipe>/sources.json`` and ``nix/<recipe>/default.nix`` (fixed-output fetches of
  every artifact, :mod:`lemonpack.nix`), for recipes that have artifacts.

Annotations use the vendor namespace ``dev.lemonpack.*`` (recipe, os, accelerator,
gpu-arch, source, sha256, version-policy, images). Image manifests also carry the image-spec's
pre-defined keys (``annotations.md``): ``org.opencontainers.image.created``, the RFC 3339 form
of the build's epoch (``SOURCE_DATE_EPOCH``, the config's ``created`` too), and
``org.opencontainers.image.source`` / ``.revision`` when the build is told them
(``--source-url``, ``--revision``: the repository and commit of the recipe; lemonpack does not
read them from a git checkout, so the build directory never changes the bytes).

Images run as a non-root user: the config's ``User`` is :data:`IMAGE_USER` (``65532:65532``,
numeric so a kubelet can check ``runAsNonRoot``) unless a base sets its own ``User``, which
is kept. Byte-reproducible: mtimes are
``SOURCE_DATE_EPOCH`` (or 0), owners 0, modes normalised, gzip has no name or time, JSON is
canonical, and nothing depends on the build directory or the clock. The layout is built
in a temporary sibling and renamed into place; any failure (hash mismatch, unsafe
archive, unpinned image) leaves ``--out`` as it was. Memory stays flat: artifacts and
layers are streamed, and built artifact layers are cached by the artifact's digest
(:mod:`lemonpack.builder.layercache`) so a warm rebuild only copies blobs, checking each
one on the way (nothing from a cache reaches a layout unverified).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lemonpack.builder.artifact import (artifact_where, check_recorded, fetch_target, other_cpu_artifacts,
                                       source_field, unpack_target)
from lemonpack.builder.baselayers import BaseLayers
from lemonpack.builder.layercache import LayerCache, read_layer, recorded_executables
from lemonpack.contract import EffectiveBlock, Recipe, targets
from lemonpack.contract.cpuartifacts import for_cpu
from lemonpack.contract.extends import resolve_extends
from lemonpack.digest import sha256_text
from lemonpack.errors import (BuildError, LemonpackError, SelectionError,
                              StorageError, UnsafeContentError)
from lemonpack.fetch import ArtifactCache, Fetched, Mirror, mirror_path
from lemonpack.fetch.staging import remove_tree
from lemonpack.files import os_error_reason
from lemonpack.nix import NixSource, write_package_nix, write_recipe_json, write_sources_json
from lemonpack.oci import (ANNOTATION_TITLE, DEFAULT_COMPRESSLEVEL, MEDIA_TYPE_LAYER_TAR_GZIP, MEDIA_TYPE_LAYER_TAR_ZSTD, Descriptor, LayerInfo, LayoutWriter,
                           write_dir_layer, write_files_layer)
from lemonpack.oci.base import BaseImage, BaseSource
from lemonpack.oci.mediatypes import (ANNOTATION_CREATED, ANNOTATION_REVISION, ANNOTATION_SOURCE,
                                      MEDIA_TYPE_LEMONPACK_RECIPE)
from lemonpack.oci.layout import rfc3339
from lemonpack.oci.policy import container_images, require_pinned

log = logging.getLogger(__name__)

RECIPE_ARTIFACT_TYPE = RECIPE_MEDIA_TYPE = MEDIA_TYPE_LEMONPACK_RECIPE
ANNOTATION_PREFIX = "dev.lemonpack."
#: The ``User`` of an engine image whose base sets none: uid and gid 65532 (distroless's
#: ``nonroot``), numeric so that Kubernetes can verify ``runAsNonRoot`` without a passwd file.
IMAGE_USER = "65532:65532"

from lemonpack.oci.platform import GOARCH  # noqa: E402,F401  (the one host -> GOARCH mapping)


@dataclass(frozen=True)
class BuildOptions:
    """How to build. ``out``: the OCI layout directory; ``os``/``accelerator``/``arch``
    narrow the targets (None: every block and arch override); ``mirror`` rewrites artifact
    URLs (hashes stay pinned); ``cache``: artifact cache (default under the XDG cache);
    ``epoch``: the timestamp of every file and of the image configs; ``cpu_arch``: the
    OCI ``architecture`` of images (the recipe's accelerator axis is not the CPU);
    ``progress``: download progress bars (None: when stderr is a terminal); ``base``: the
    base image the engine images are built on (:func:`lemonpack.oci.base.open_base`; None:
    artifact images holding the engine alone); ``compression``: ``gzip`` (``tar+gzip``
    layers, default) or ``zstd`` (``tar+zstd``); ``source_url``/``revision``: the image
    manifests' ``org.opencontainers.image.source``/``.revision`` (None: not written)."""

    out: Path
    os: str | None = None
    accelerator: str | None = None
    arch: str | None = None
    mirror: Mirror | None = None
    cache: ArtifactCache | None = None
    epoch: int = 0
    cpu_arch: str = "amd64"
    progress: bool | None = None
    compresslevel: int = DEFAULT_COMPRESSLEVEL
    base: BaseSource | None = None
    compression: str = "gzip"
    source_url: str | None = None
    revision: str | None = None


@dataclass(frozen=True)
class TargetResult:
    """What was built for one target: ``tag``, ``kind`` (``image`` or ``recipe``),
    manifest ``digest``, the artifact's ``source`` URL and ``sha256`` (verified, or observed
    under ``roll_forward``), ``policy``, and the pinned container ``images``."""

    recipe: str
    target: str
    tag: str
    kind: str
    digest: str
    os: str
    accelerator: str
    gpu_arch: str | None
    source: str | None = None
    sha256: str | None = None
    policy: str | None = None
    images: tuple[str, ...] = ()
    from_cache: bool = False

    def to_json(self) -> dict:
        """JSON form; ``sha256`` is written ``sha256:<hex>`` like every digest lemonpack prints."""
        out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}
        if self.sha256:
            out["sha256"] = sha256_text(self.sha256)
        return out


@dataclass(frozen=True)
class BuildResult:
    """The whole build: the layout ``out``, per recipe its index digest, every target,
    and the Nix directories written (relative to ``out``)."""

    out: Path
    indexes: dict[str, str]
    targets: tuple[TargetResult, ...]
    nix: tuple[str, ...] = field(default=())

    def to_json(self) -> dict:
        """JSON form for ``lemonpack build --json``."""
        return {"out": str(self.out), "indexes": self.indexes, "nix": list(self.nix),
                "targets": [t.to_json() for t in self.targets]}


def _annotations(t: EffectiveBlock, extra: dict[str, str | None]) -> dict[str, str]:
    base = {"recipe": t.recipe.recipe, "os": t.os, "accelerator": t.accelerator, "gpu-arch": t.gpu_arch,
            "target": t.target_name, "extends": t.recipe.extends}
    base.update(extra)
    out = {ANNOTATION_PREFIX + k: v for k, v in base.items() if v}
    out[ANNOTATION_TITLE] = t.recipe.display_name
    return out


def _image_annotations(opts: BuildOptions) -> dict[str, str]:
    """The image-spec's pre-defined annotations of an image manifest (module docstring)."""
    out = {ANNOTATION_CREATED: rfc3339(opts.epoch)}
    if opts.source_url:
        out[ANNOTATION_SOURCE] = opts.source_url
    if opts.revision:
        out[ANNOTATION_REVISION] = opts.revision
    return out


def target_images(t: EffectiveBlock) -> tuple[str, ...]:
    """The container image (pinned by now) a target's container run/create/pull argv names
    (:func:`lemonpack.oci.policy.container_images`), or ``()``."""
    if not t.command:
        return ()
    return container_images(t.command, t.args)


def _media_type(compression: str) -> str:
    return MEDIA_TYPE_LAYER_TAR_ZSTD if compression == "zstd" else MEDIA_TYPE_LAYER_TAR_GZIP


def _recipe_layer(lw: LayoutWriter, recipe: Recipe, epoch: int, level: int, compression: str = "gzip") -> Descriptor:
    path = f"etc/lemonpack/recipes/{recipe.recipe}.json"
    return lw.add_blob_file(_media_type(compression),
                            lambda f: write_files_layer([(path, recipe.canonical, 0o644)], f,
                                                        mtime=epoch, compresslevel=level, compression=compression))


class _BadEntry(Exception):
    """A cached layer that is not what its record says."""


class _OutFailed(Exception):
    """Writing a cached layer's copy into the layout failed (the layout's disk, not the
    cache entry): carries the ``OSError``."""


class _Out:
    """``f`` whose write errors become :class:`_OutFailed`, so a full disk under the
    layout is not mistaken for a bad cache entry."""

    def __init__(self, f):
        self.f = f

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as exc:
            raise _OutFailed(exc) from None


def _cached_layer(lw: LayoutWriter, layers: LayerCache, key: str, blob: Path, record: dict) -> Descriptor | None:
    """Copy a cached layer into the layout: by the kernel's copy when the blob's stat facts
    are the ones recorded when it was verified, else checking digest, size and diff_id in
    the same read (and recording the new facts); None (and nothing in the layout) when the
    entry is bad."""
    zstd = str(record.get("format", "")).endswith("+zstd")
    media = MEDIA_TYPE_LAYER_TAR_ZSTD if zstd else MEDIA_TYPE_LAYER_TAR_GZIP
    if layers.digests.known(blob) == record["digest"]:
        desc = Descriptor(media, record["digest"], record["size"])
        return lw.copy_blob(blob, desc, diff_id=record["diff_id"], verify=False)

    before = layers.digests.facts(blob)  # taken before the copy reads it

    def copy(f):
        try:
            facts = read_layer(blob, out=_Out(f), zstd=zstd)
        except OSError as exc:
            raise _BadEntry(exc.strerror or str(exc)) from None
        for name, got in (("digest", facts.digest), ("size", facts.size), ("diff_id", facts.diff_id)):
            if got != record[name]:
                raise _BadEntry(f"{name} is {got}, record says {record[name]}")
        return LayerInfo(facts.digest, facts.diff_id, facts.size, media)
    try:
        desc = lw.add_blob_file(media, copy)
    except _OutFailed as exc:
        raise exc.args[0] from None
    except _BadEntry as exc:
        log.warning("cached layer %s is corrupt (%s); rebuilding it", blob, exc)
        return None
    layers.hashed(blob, record["digest"], before)
    return desc


def extends_bases(recipe: Recipe, available: Mapping[str, Recipe]) -> tuple[Recipe, ...]:
    """The recipes ``recipe`` extends, nearest first, taken from ``available`` (id ->
    recipe) by the rule discovery and ``lemonpack run`` use
    (:func:`lemonpack.contract.extends.resolve_extends`). Raises LemonpackError naming the
    recipe file and the reason when the chain cannot be resolved (a missing base, a
    built-in base, a cycle)."""
    if recipe.extends is None:
        return ()
    pool = {**available, recipe.recipe: recipe}
    res = resolve_extends(pool)
    for drop in res.dropped:
        if drop.recipe == recipe.recipe:
            raise BuildError(f"{recipe.file}: extends: {drop.reason}; give the base recipe file in the same "
                             f"build or install it where discovery finds it (lemonpack backends list)")
    return tuple(pool[b] for b in res.chains.get(recipe.recipe, ()))


def _artifact_layer(lw: LayoutWriter, fetched: Fetched, t: EffectiveBlock, opts: BuildOptions,
                    layers: LayerCache, scratch: Path) -> Descriptor:
    prefix = f"opt/lemonpack/{t.recipe.recipe}"
    inputs = LayerCache.inputs(fetched.sha256, prefix, opts.epoch, opts.compresslevel, opts.compression)
    key = LayerCache.key_of(inputs)
    hit = layers.get(key)
    recorded = recorded_executables(hit[1]) if hit is not None else None
    if hit is not None and recorded is not None:  # a record from before the CPU check is rebuilt
        check_recorded(recorded, opts.cpu_arch, artifact_where(fetched, t))
        desc = _cached_layer(lw, layers, key, *hit)
        if desc is not None:
            return desc
    if hit is not None:
        layers.drop(key)
    unpacked = Path(tempfile.mkdtemp(dir=scratch)) / "tree"
    try:
        found = unpack_target(fetched, unpacked, t, cpu_arch=opts.cpu_arch)
        fh, tmp = layers.staging()
        built: list[LayerInfo] = []

        def write(f):
            built.append(write_dir_layer(unpacked, prefix, f, mtime=opts.epoch,
                                         compresslevel=opts.compresslevel, compression=opts.compression))
            return built[0]
        try:
            try:
                desc = lw.add_blob_file(_media_type(opts.compression), write, tee=(fh,))
            except UnsafeContentError as e:
                raise UnsafeContentError(f"{t.recipe.file}: {source_field(t)}: artifact {fetched.url} "
                                         f"({sha256_text(fetched.sha256)}): unsafe member {e}") from None
            info = built[0]
            layers.commit(inputs, fh, tmp, info.digest, info.diff_id, info.size,
                          {"executables": [[rel, exe.to_json()] for rel, exe in found]})
        except BaseException:
            layers.discard(fh, tmp)
            raise
        return desc
    except OSError as exc:
        raise StorageError(f"{t.recipe.file}: {source_field(t)}: artifact {fetched.url} "
                           f"({sha256_text(fetched.sha256)}): cannot write its layer into {opts.out} and the layer cache "
                           f"{layers.root}: {exc.strerror or exc}") from None
    finally:
        remove_tree(unpacked.parent)


def _base_for(t: EffectiveBlock, opts: BuildOptions) -> BaseImage:
    assert opts.base is not None, "called only when the build has a base"
    try:
        return opts.base.for_platform(t.os, opts.cpu_arch, f"target {t.recipe.recipe}.{t.target_name} "
                                      f"({t.recipe.file})")
    except LemonpackError as exc:
        if isinstance(exc, SelectionError) and f"is {t.os}/" in str(exc):  # another platform: say how to narrow
            raise SelectionError(f"{exc} (choose the targets this base runs with --os/--accelerator/--cpu-arch)") \
                from None
        raise


def _based_config(image: BaseImage, t: EffectiveBlock, opts: BuildOptions, prefix: str, entrypoint: list[str],
                  labels: dict[str, str], added: int) -> dict:
    config: dict = {"architecture": opts.cpu_arch, "os": t.os,
                    "config": image.config_for(prefix, entrypoint, labels)}
    config["config"].setdefault("User", IMAGE_USER)
    if image.config.get("variant"):
        config["variant"] = image.config["variant"]
    history = image.history(added, rfc3339(opts.epoch), f"lemonpack build {t.recipe.recipe}.{t.target_name}")
    if history is not None:
        config["history"] = history
    return config


def _image_config(t: EffectiveBlock, opts: BuildOptions, labels: dict[str, str]) -> dict:
    prefix = f"/opt/lemonpack/{t.recipe.recipe}"
    config: dict = {"Env": [f"PATH={prefix}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                    "Labels": labels, "WorkingDir": prefix, "User": IMAGE_USER}
    if t.binary:
        config["Entrypoint"] = [f"{prefix}/{t.binary}"]
    return {"architecture": opts.cpu_arch, "os": t.os, "config": config}


def build_recipes(recipes: Sequence[Recipe], opts: BuildOptions,
                  on_target: Callable[[TargetResult], None] | None = None,
                  bases: Mapping[str, Recipe] | None = None) -> BuildResult:
    """Build ``recipes`` into one OCI image layout at ``opts.out``; see the module docstring.

    A recipe that ``extends`` another (never a variant_of, so always an artifact manifest)
    is packaged with its base chain (from ``recipes``, then ``bases``: id -> recipe, e.g.
    the discovered ones): the bases' canonical files follow its recipe blob as layers,
    nearest first, each annotated ``dev.lemonpack.extends-base``; the manifest's
    ``dev.lemonpack.extends`` annotation names the direct base.

    Raises :class:`~lemonpack.errors.ManifestError` (unpinned container image),
    :class:`~lemonpack.errors.SelectionError` (narrowing matches nothing),
    :class:`~lemonpack.errors.IntegrityError` (artifact hash mismatch: expected and actual),
    :class:`~lemonpack.errors.FetchError`, :class:`~lemonpack.errors.UnsafeContentError`;
    :class:`~lemonpack.errors.StorageError` (the disk failed: no space, a cache directory
    that cannot be written ...); in every case ``opts.out`` is unchanged. ``on_target`` is
    called after each target.
    """
    try:
        return _build_recipes(recipes, opts, on_target, bases)
    except OSError as exc:
        raise StorageError(f"cannot build into {opts.out}: {os_error_reason(exc, opts.out)}") from None


def _build_recipes(recipes: Sequence[Recipe], opts: BuildOptions,
                   on_target: Callable[[TargetResult], None] | None,
                   bases: Mapping[str, Recipe] | None) -> BuildResult:
    seen: dict[str, str] = {}
    for r in recipes:
        if r.recipe in seen:
            raise BuildError(f"recipe id {r.recipe!r} given twice: {seen[r.recipe]} and {r.file}")
        seen[r.recipe] = r.file
    plans = []
    available = {**(bases or {}), **{r.recipe: r for r in recipes}}
    for recipe in recipes:
        require_pinned(recipe)
        plans.append((recipe, [for_cpu(t, opts.cpu_arch) for t in targets(recipe, os=opts.os,
                                                                            accelerator=opts.accelerator,
                                                                            arch=opts.arch)],
                      extends_bases(recipe, available)))
    cache = opts.cache or ArtifactCache()
    layers = LayerCache(Path(cache.root).parent / "layers")  # beside the artifact store it is built from
    results: list[TargetResult] = []
    indexes: dict[str, str] = {}
    nix_dirs: list[str] = []
    held = layers.scratch()
    scratch = held.path
    try:
        with LayoutWriter(opts.out) as lw:
            based = BaseLayers(lw, layers) if opts.base is not None else None
            for recipe, tgts, chain in plans:
                recipe_layer = _recipe_layer(lw, recipe, opts.epoch, opts.compresslevel, opts.compression)
                recipe_blob = lw.add_blob_bytes(RECIPE_MEDIA_TYPE, recipe.canonical)
                base_blobs = tuple(lw.add_blob_bytes(RECIPE_MEDIA_TYPE, b.canonical).with_annotations(
                    {ANNOTATION_TITLE: f"{b.recipe}.json", ANNOTATION_PREFIX + "extends-base": b.recipe})
                    for b in chain)
                descs: list[Descriptor] = []
                tags: dict[str, Descriptor] = {}
                nix_sources: list[NixSource] = []
                for t in tgts:
                    result, desc = _build_target(lw, t, opts, cache, layers, scratch, recipe_layer, recipe_blob,
                                                 base_blobs, based)
                    if result.source:
                        assert result.sha256 is not None, "a fetched artifact has its sha256"
                        nix_sources.append(NixSource(
                            name=t.target_name, url=result.source, mirror_path=mirror_path(result.source),
                            sha256_hex=result.sha256, os=t.os, accelerator=t.accelerator,
                            gpu_arch=t.gpu_arch, binary=t.binary, cpu_arch=opts.cpu_arch,
                            others=other_cpu_artifacts(t, opts.cpu_arch)))
                    descs.append(desc)
                    tags[result.tag] = desc
                    results.append(result)
                    if on_target:
                        on_target(result)
                index = lw.add_index(descs, {ANNOTATION_PREFIX + "recipe": recipe.recipe,
                                             ANNOTATION_TITLE: recipe.display_name})
                tags[recipe.recipe] = index
                lw.set_tags(tags)
                indexes[recipe.recipe] = index.digest
                if nix_sources:
                    rel = f"nix/{recipe.recipe}"
                    nix_dir = lw.staging_dir / rel
                    nix_dir.mkdir(parents=True, exist_ok=True)
                    write_sources_json(nix_dir, recipe.recipe, nix_sources)
                    write_recipe_json(nix_dir, recipe.canonical)
                    write_package_nix(nix_dir, recipe.recipe)
                    nix_dirs.append(rel)
    finally:
        remove_tree(scratch)
        held.close()
    return BuildResult(out=opts.out, indexes=indexes, targets=tuple(results), nix=tuple(nix_dirs))


def _build_target(lw: LayoutWriter, t: EffectiveBlock, opts: BuildOptions, cache: ArtifactCache,
                  layers: LayerCache, scratch: Path, recipe_layer: Descriptor,
                  recipe_blob: Descriptor, base_blobs: Sequence[Descriptor] = (),
                  based: BaseLayers | None = None) -> tuple[TargetResult, Descriptor]:
    recipe = t.recipe
    tag = f"{recipe.recipe}.{t.target_name}"
    prov = t.provenance
    prefix = f"opt/lemonpack/{recipe.recipe}"
    if recipe.variant_of and prov.source:
        image: BaseImage | None = None
        base_layers: list[Descriptor] = []
        if based is not None:  # before the fetch: a wrong base fails fast
            image = _base_for(t, opts)
            base_layers = based.put(image, (prefix,))
        fetched = fetch_target(t, cache=cache, mirror=opts.mirror, progress=opts.progress)
        artifact = _artifact_layer(lw, fetched, t, opts, layers, scratch)
        notes = {"source": prov.source, "sha256": sha256_text(fetched.sha256), "version-policy": prov.policy,
                 "variant-of": recipe.variant_of, "binary": t.binary}
        ann = _annotations(t, notes)
        if image is None:
            desc = lw.add_image_manifest(_image_config(t, opts, ann), [artifact, recipe_layer],
                                         {**ann, **_image_annotations(opts)}, created=opts.epoch)
        else:
            config = _based_config(image, t, opts, prefix, [f"/{prefix}/{t.binary}"], ann, 2)
            desc = lw.add_image_manifest(config, [*base_layers, artifact, recipe_layer],
                                         {**ann, **image.annotations(), **_image_annotations(opts)},
                                         created=opts.epoch)
        desc = desc.with_annotations(ann)
        return TargetResult(recipe.recipe, t.target_name, tag, "image", desc.digest, t.os, t.accelerator,
                            t.gpu_arch, prov.source, fetched.sha256, prov.policy, (), fetched.from_cache), desc
    images = target_images(t)
    if based is not None and not recipe.variant_of and t.command and not images:
        # a passthrough engine found on the base's PATH (or at an absolute path in it)
        image = _base_for(t, opts)
        base_layers = based.put(image, (prefix,))
        ann = _annotations(t, {})
        config = _based_config(image, t, opts, prefix, [t.command], ann, 1)
        desc = lw.add_image_manifest(config, [*base_layers, recipe_layer],
                                     {**ann, **image.annotations(), **_image_annotations(opts)},
                                     created=opts.epoch).with_annotations(ann)
        return TargetResult(recipe.recipe, t.target_name, tag, "image", desc.digest, t.os, t.accelerator,
                            t.gpu_arch), desc
    ann = _annotations(t, {"images": ",".join(images) or None, "variant-of": recipe.variant_of,
                           "binary": t.binary})
    desc = lw.add_artifact_manifest(RECIPE_ARTIFACT_TYPE, [recipe_blob, *base_blobs], ann).with_annotations(ann)
    return TargetResult(recipe.recipe, t.target_name, tag, "recipe", desc.digest, t.os, t.accelerator,
                        t.gpu_arch, images=images), desc
