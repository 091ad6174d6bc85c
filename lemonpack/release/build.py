"""``lemonpack release``: the release lock + ``containers/*.json`` -> one OCI layout per image.

For every definition (:mod:`lemonpack.release.definition`) the extension pipeline
(:func:`lemonpack.extensions.pipeline.run_pipeline`, ext-core) selects the lock's
extensions (or the definition's subset of them, closed over dependencies) for the
definition's features, :func:`lemonpack.extensions.generate.generate` writes the registry,
header and JSON, and every recipe the definition names is fetched through the verified
fetch path (:func:`lemonpack.builder.artifact.fetch_target`: cache, mirror, sha256 while
streaming, progress bars) and unpacked safely. :func:`lemonpack.release.image.write_image`
then writes the image into ``OUT/<name>/``.

Output, ``OUT/``::

    release.json          canonical JSON: epoch, lock digest, per image its index and manifest
                          digests, api version, features, extensions, recipes (no paths, no clock)
    <name>/               an OCI image layout per definition (tags <name>, <name>.<arch>)

Reproducibility: times come from ``SOURCE_DATE_EPOCH`` or, when unset, the fixed epoch 0
(1970-01-01T00:00:00Z), the same default as ``lemonpack build``: a release is a function
of the tree, the lock and the definitions, not of the clock, the checkout's git history,
the directory, the umask or the inputs' mtimes and owners.

Atomicity: everything is built in a temporary sibling of ``OUT`` and renamed into place
only when every image succeeded; a failure leaves ``OUT`` as it was. An existing ``OUT``
is replaced only when it is empty or an earlier release (it holds ``release.json``).
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lemonpack.builder.artifact import artifact_where, check_recorded, fetch_target, unpack_target
from lemonpack.builder.layercache import LayerCache
from lemonpack.builder.baselayers import BaseLayers
from lemonpack.contract import load_recipe, targets
from lemonpack.contract.cpuartifacts import for_cpu, offered_cpus
from lemonpack.digest import Digest, sha256_text
from lemonpack.errors import BuildError, LockError, ManifestError, OutputError, Problem, SelectionError, StorageError
from lemonpack.fetch import ArtifactCache, Mirror
from lemonpack.files import open_regular
from lemonpack.files import os_error_reason, remove_tree, replace_directory
from lemonpack.oci import DEFAULT_COMPRESSLEVEL, LayoutWriter
from lemonpack.oci.base import BaseSource, open_base
from lemonpack.canonical import canonical_json
from lemonpack.oci.policy import require_pinned
from lemonpack.release.definition import ImageDefinition, RecipeRef, load_definitions
from lemonpack.release.image import ExtensionTree, ImageInputs, ImageResult, RecipePayload, write_image

MARKER = "release.json"
RELEASE_KIND = "lemonpack-release"


@dataclass(frozen=True)
class ReleaseOptions:
    """How to release. ``out``: the output directory; ``lock``: the release lock file;
    ``tree``: the repository top (default: the lock's directory) where the pipeline
    discovers extensions and recipe paths are resolved; ``containers``: the definitions'
    directory (default ``<tree>/containers``); ``only``: image names to build (default
    all); ``mirror``: artifact mirror (hashes stay pinned); ``cache``: artifact cache
    (default the XDG one); ``epoch``: timestamp of every file and config;
    ``progress``: download progress bars (None: when stderr is a terminal); ``base``: the
    base of every image, overriding the definitions' ``base`` (``oci:DIR[:TAG]`` or
    ``HOST/REPO@sha256:<hex>``; None: each definition's own); ``open_base``: how a base
    name is opened (default :func:`lemonpack.oci.base.open_base`, local layouts only; the
    CLI passes one that also pulls registry bases)."""

    out: Path
    lock: Path
    tree: Path | None = None
    containers: Path | None = None
    only: tuple[str, ...] = ()
    mirror: Mirror | None = None
    cache: ArtifactCache | None = None
    epoch: int = 0
    progress: bool | None = None
    compresslevel: int = DEFAULT_COMPRESSLEVEL
    base: str | None = None
    open_base: Callable[[str], BaseSource] | None = None

    @property
    def root(self) -> Path:
        """The repository top: ``tree`` or the lock's directory."""
        return Path(self.tree) if self.tree is not None else Path(self.lock).resolve().parent

    @property
    def definitions_dir(self) -> Path:
        """``containers`` or ``<root>/containers``."""
        return Path(self.containers) if self.containers is not None else self.root / "containers"


@dataclass(frozen=True)
class ImageSummary:
    """One released image: ``name``, the ``layout`` directory, ``index`` digest,
    ``manifests`` (arch -> digest), ``api_version``, sorted ``features``, ``extensions``
    (names, registry order), ``recipes`` (``{"recipe", "source", "sha256"}``)."""

    name: str
    layout: Path
    index: str
    manifests: dict[str, str]
    api_version: str
    features: tuple[str, ...]
    extensions: tuple[str, ...]
    recipes: tuple[dict, ...] = ()

    def record(self) -> dict:
        """The entry of ``release.json`` (no absolute paths)."""
        return {"name": self.name, "index": self.index, "manifests": self.manifests,
                "api_version": self.api_version, "features": list(self.features),
                "extensions": list(self.extensions), "recipes": list(self.recipes)}


@dataclass(frozen=True)
class ReleaseResult:
    """The release: ``out``, ``epoch``, ``lock`` digest (``sha256:<hex>`` of its bytes), images."""

    out: Path
    epoch: int
    lock: str
    images: tuple[ImageSummary, ...] = field(default=())

    def record(self) -> dict:
        """``release.json``'s document."""
        return {"kind": RELEASE_KIND, "schema": 1, "epoch": self.epoch, "lock": self.lock,
                "images": [i.record() for i in self.images]}

    def to_json(self) -> dict:
        """``lemonpack release --json``: the record plus ``out`` and each image's ``layout``."""
        doc = self.record()
        doc["out"] = str(self.out)
        for entry, image in zip(doc["images"], self.images):
            entry["layout"] = str(image.layout)
        return doc


# --- the lock -------------------------------------------------------------------------------

def _read_lock(lock: Path) -> tuple[bytes, list[str]]:
    """The lock's bytes and its extension names (validated by the extension pipeline's
    :func:`~lemonpack.extensions.pipeline.read_lock`, errors naming the file and field)."""
    from lemonpack.extensions.pipeline import read_lock

    try:
        with open_regular(lock, follow_symlinks=True) as f:
            data = f.read()
    except OSError as exc:
        raise ManifestError([Problem(str(lock), "", "unreadable", f"cannot read the release lock: "
                                                                  f"{exc.strerror or exc}")]) from None
    return data, list(read_lock(Path(lock)))


# --- gathering one image's inputs -------------------------------------------------------------

def _extension_dir(ext) -> Path:
    path = Path(ext.path)
    return path.parent if path.name == "extension.json" or path.is_file() else path


def _select(d: ImageDefinition, root: Path, lock: Path, lock_names: list[str]):
    from lemonpack.extensions.apilock import require_record_lock
    from lemonpack.extensions.pipeline import run_pipeline

    require_record_lock(root)  # a build step: the API revision must be the locked one

    if d.extensions != "lock":
        problems = [Problem(d.file, f"extensions[{i}]", "not-in-lock",
                            f"{n!r} is not in the release lock {lock} (a release image ships official "
                            f"extensions only: {', '.join(lock_names)})")
                    for i, n in enumerate(d.extensions) if n not in lock_names]
        if problems:
            raise ManifestError(problems)
    selection = run_pipeline(root, select="lock" if d.extensions == "lock" else list(d.extensions),
                             lock=lock, features=frozenset(d.features),
                             environ={})  # GUFO_EXTENSION_DIRS of the caller must not change a release
    community = [e.name for e in selection.extensions if not e.official]
    if community:
        raise BuildError(f"{d.file}: extensions: the selection pulls in community extensions "
                         f"({', '.join(community)}) as dependencies; a release image ships only "
                         f"extensions of the lock {lock}")
    return selection


class _Recipes:
    """Fetches and unpacks recipe artifacts once per (file, block) for the whole release."""

    def __init__(self, opts: ReleaseOptions, scratch: Path, stack: contextlib.ExitStack,
                 on_fetch: Callable[[str, str, bool], None] | None):
        self.opts, self.scratch, self.stack, self.on_fetch = opts, scratch, stack, on_fetch
        self.cache = opts.cache or ArtifactCache()
        self.done: dict[tuple, RecipePayload] = {}
        self._example_mirror: Mirror | None = None

    def _mirror_for(self, url: str) -> Mirror | None:
        from urllib.parse import urlsplit

        from lemonpack.examples import serve_mirror

        if (urlsplit(url).hostname or "").lower() != "example.invalid":
            return self.opts.mirror
        # example.invalid never resolves (RFC 2606): the shipped example's artifact is served
        # from the installed package, as `lemonpack build --example` does; its sha256 stays pinned.
        if self._example_mirror is None:
            self._example_mirror = Mirror(self.stack.enter_context(serve_mirror()))
        return self._example_mirror

    def payload(self, d: ImageDefinition, ref: RecipeRef, arch: str) -> RecipePayload:
        """The payload of ``ref`` in ``d``'s image for the architecture ``arch``: the
        artifact the recipe's per-CPU artifacts give for it
        (:func:`lemonpack.contract.cpuartifacts.for_cpu`), else the block's own one, shared by
        every architecture and so checked against each."""
        recipe = load_recipe(ref.path)
        try:
            found = targets(recipe, os="linux", accelerator=ref.accelerator, arch=ref.gpu_arch)
        except SelectionError as exc:
            raise SelectionError(f"{d.file}: {ref.field}.accelerator: {exc}") from None
        t = found[0] if ref.gpu_arch else next(t for t in found if t.arch_pattern is None)
        per_cpu = bool(offered_cpus(recipe, t.os, t.accelerator, t.arch_pattern))
        key = (ref.path, ref.accelerator, ref.gpu_arch, arch if per_cpu else None)
        if key in self.done:
            return self.done[key]
        require_pinned(recipe)
        if per_cpu:
            try:
                t = for_cpu(t, arch)
            except SelectionError as exc:
                raise SelectionError(f"{d.file}: {ref.field}: architectures lists {arch}: {exc}") from None
        prov = t.provenance
        if not (recipe.variant_of and prov.source):
            payload = RecipePayload(recipe.recipe, recipe.canonical)
        else:
            if prov.policy == "roll_forward":
                raise BuildError(f"{d.file}: {ref.field}: {ref.file} ({t.path}) uses version policy "
                                 "roll_forward; a release image needs an artifact pinned by sha256")
            if self.on_fetch:
                self.on_fetch(recipe.recipe, prov.source, False)
            fetched = fetch_target(t, cache=self.cache, mirror=self._mirror_for(prov.source),
                                   progress=self.opts.progress)
            if self.on_fetch:
                self.on_fetch(recipe.recipe, prov.source, True)
            dest = self.scratch / f"{len(self.done)}-{recipe.recipe}"
            exes = unpack_target(fetched, dest, t, cpu_arch=arch)
            for other in ([] if per_cpu else d.architectures):  # one payload goes into every image
                check_recorded(exes, other, f"{d.file}: {ref.field}: {artifact_where(fetched, t)}")
            payload = RecipePayload(recipe.recipe, recipe.canonical, dest, prov.source, sha256_text(fetched.sha256))
        self.done[key] = payload
        return payload


def gather_inputs(d: ImageDefinition, opts: ReleaseOptions, lock_bytes: bytes, lock_names: list[str],
                  recipes: _Recipes, base: BaseSource | None = None) -> ImageInputs:
    """The :class:`ImageInputs` of definition ``d``: pipeline selection, generated files,
    lock and fetched recipe payloads; on a ``base``, gufo compiled for every architecture of
    ``d`` (:func:`lemonpack.extensions.compile.compile_gufo`: this machine's C++ compiler for its
    own, the GNU cross compiler for another, the same flags). Raises the pipeline's, the compiler's,
    the fetch's and the recipe loader's errors, and LemonpackError naming ``d.file`` and
    the field."""
    from lemonpack.extensions.generate import generate

    if base is not None:
        from lemonpack.extensions.compile import CompileError, toolchain

        for arch in d.architectures:  # before anything is fetched or compiled: a missing compiler fails fast
            try:
                toolchain(arch)
            except CompileError as exc:
                raise BuildError(f"{d.file}: architectures: on base {base.name} each image runs its own "
                                 f"gufo-registry; {exc}") from None
    selection = _select(d, opts.root, Path(opts.lock), lock_names)
    generated = generate(selection)
    exts = tuple(ExtensionTree(e.name, e.version, _extension_dir(e)) for e in selection.extensions)
    by_arch = {a: tuple(recipes.payload(d, r, a) for r in d.recipes) for a in d.architectures}
    payloads = by_arch[d.architectures[0]]
    names = [p.recipe for p in payloads]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise BuildError(f"{d.file}: recipes: recipe id {', '.join(map(repr, dupes))} named twice "
                         "(two files or two blocks of one recipe); an image holds one artifact per recipe")
    compiled: dict[str, Path] = {}
    if base is not None:
        from lemonpack.extensions.compile import compile_gufo

        for arch in d.architectures:  # this machine's compiler for its own, the cross compiler for another
            compiled[arch] = compile_gufo(selection, recipes.scratch / f"gufo-{d.name}-{arch}", cpu_arch=arch).root
    return ImageInputs(d, exts, generated, lock_bytes, selection.api_version, payloads, base, compiled or None,
                       by_arch if any(p != payloads for p in by_arch.values()) else None)


# --- the output directory --------------------------------------------------------------------

def _is_release(path: Path) -> bool:
    try:
        doc = json.loads((path / MARKER).read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("kind") == RELEASE_KIND


def _check_out(out: Path) -> None:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise OutputError(f"{out}: exists and is not a directory; refusing to replace it")
    if out.is_dir() and not _is_release(out) and any(out.iterdir()):
        raise OutputError(f"{out}: exists, is not empty and is not a lemonpack release "
                          f"(no {MARKER}); refusing to replace it")


def _install(tmp: Path, out: Path) -> None:
    _check_out(out)
    if out.is_dir() and not _is_release(out):
        out.rmdir()  # empty (checked above)
    replace_directory(tmp, out)


# --- the whole release -------------------------------------------------------------------------

def release(opts: ReleaseOptions, *, on_image: Callable[[ImageSummary], None] | None = None,
            on_fetch: Callable[[str, str, bool], None] | None = None) -> ReleaseResult:
    """Release every definition of ``opts.definitions_dir`` (or ``opts.only``) into
    ``opts.out``; see the module docstring.

    ``on_image(summary)`` is called after each image, ``on_fetch(recipe, url, done)``
    before and after each artifact fetch. Raises :class:`ManifestError` (a definition,
    the lock, a recipe: naming the file and field), the extension pipeline's errors,
    :class:`~lemonpack.errors.IntegrityError` (artifact hash mismatch),
    :class:`~lemonpack.errors.FetchError`, :class:`~lemonpack.errors.UnsafeContentError`,
    :class:`StorageError` (the disk); in every case ``opts.out`` is unchanged.
    """
    out = Path(opts.out)
    _check_out(out)
    lock_bytes, lock_names = _read_lock(Path(opts.lock))
    defs = load_definitions(opts.definitions_dir, opts.root, opts.only)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / f"{out.name}.tmp-{secrets.token_hex(6)}"
        tmp.mkdir()
    except OSError as exc:
        raise StorageError(f"cannot create the release directory next to {out}: {os_error_reason(exc, out)}") from None
    try:
        with contextlib.ExitStack() as stack:
            scratch = tmp / ".scratch"
            scratch.mkdir()
            recipes = _Recipes(opts, scratch, stack, on_fetch)
            layer_cache = LayerCache(Path(recipes.cache.root).parent / "layers")
            bases: dict[str, BaseSource] = {}
            images = []
            for d in defs:
                spec = opts.base or d.base
                base = None
                if spec != "scratch":
                    if spec not in bases:
                        bases[spec] = (opts.open_base or open_base)(spec)
                    base = bases[spec]
                inputs = gather_inputs(d, opts, lock_bytes, lock_names, recipes, base)
                with LayoutWriter(tmp / d.name) as lw:
                    written = write_image(lw, inputs, epoch=opts.epoch, compresslevel=opts.compresslevel,
                                          based=BaseLayers(lw, layer_cache) if base is not None else None)
                summary = _summary(out, inputs, written)
                images.append(summary)
                if on_image:
                    on_image(summary)
            remove_tree(scratch)
        if _read_lock(Path(opts.lock))[0] != lock_bytes:
            raise LockError(f"{opts.lock}: the release lock changed while the release was built; run it again")
        result = ReleaseResult(out, opts.epoch, str(Digest.of_bytes(lock_bytes)), tuple(images))
        (tmp / MARKER).write_bytes(canonical_json(result.record()) + b"\n")
        _install(tmp, out)
    except OSError as exc:
        remove_tree(tmp)
        raise StorageError(f"cannot write the release into {out}: {exc.strerror or exc}") from None
    except BaseException:
        remove_tree(tmp)
        raise
    return result


def _summary(out: Path, inputs: ImageInputs, written: ImageResult) -> ImageSummary:
    d = inputs.definition
    distinct = dict.fromkeys((r.recipe, r.source, r.sha256) for a in d.architectures for r in inputs.recipes_for(a))
    recipes = tuple({"recipe": r, "source": src, "sha256": sha} for r, src, sha in distinct)
    return ImageSummary(d.name, out / d.name, written.index.digest,
                        {a: m.digest for a, m in written.manifests.items()}, inputs.api_version,
                        tuple(sorted(d.features)), tuple(e.name for e in inputs.extensions), recipes)


__all__ = ["ReleaseOptions", "ReleaseResult", "ImageSummary", "release", "gather_inputs", "MARKER"]
