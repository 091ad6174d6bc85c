"""The model argument of a command: a model file (or bundle directory) or a registered name.

One rule, :func:`resolve_model`, for every command that takes a model on the command line
(``lemonpack run --model``, ``lemonpack select MODEL``, and ``serve`` for models given by
file): it decides what the text names and returns a :class:`ResolvedModel` that can give
the launch's :class:`~lemonpack.runtime.launch.modelfiles.ModelSpec`, the selector's
:class:`~lemonpack.runtime.selection.selector.ModelArtifact` and the serve admission estimate of its
main file. Nothing here starts a process or touches the network.

The rule, in order:

1. ``ref`` names an existing regular file: that file (its resolved path).
2. ``ref`` holds no path separator and is a name in the model registry
   (:class:`~lemonpack.runtime.models.registry.ModelRegistry`, ``user_models.json``): that entry.
   A file name such as ``user.x.gguf`` can be registered too; an existing file of that
   name wins (rule 1).
3. ``ref`` names an existing directory: a model bundle (``x.mlpackage``) when the caller
   accepts directories (``select``), else "model path is not a file: REF" (``run``: an
   engine is handed one checkpoint file).
``lemonpack serve`` resolves the model a request names with the same rule and two
restrictions (``paths``): a file or bundle is named by an absolute (or ``~``-based) path,
never relative to the server's working directory (``paths="absolute"``); and a server
listening on a non-loopback address serves registered models only (``paths="none"``): a
path is then never looked at, so the answer cannot tell a remote client whether a file
exists.

4. Otherwise an error (exit 1): "model file not found: REF" when ``ref`` looks like a path
   (:func:`~lemonpack.runtime.models.registry.looks_like_path`: a separator or a model file suffix;
   the registry is not named, it was not what the user meant), else "no model file or
   registered model named REF in REGISTRY" (each names REF once: a caller adds no prefix).

``oci://`` checkpoints (issue 23, point 3). A registered model's checkpoint may be an OCI model
artifact pinned by digest (``oci://HOST[:PORT]/REPO[:TAG]@sha256:HEX``; a tag alone is refused
by the registry's rules, :func:`~lemonpack.runtime.models.registry.oci_checkpoint_problem`).
:func:`fetch_checkpoints` turns such a :class:`ModelSpec` into one of local files just before a
launch (``run``, ``serve``'s engine start): each ``oci://`` checkpoint is pulled into the model
store on first use (:func:`lemonpack.runtime.models.pull.pull_model`: every blob verified
against its digest while written; a later use of the same digest sends nothing) and replaced
by the path of its file in the store's directory view; ``model_dir`` becomes the main
checkpoint's directory there. ``offline`` refuses every fetch: a model not yet in the store is
a :class:`~lemonpack.errors.NotFoundError` (exit 1, as a missing model file is) naming it, the
store and ``lemonpack models pull``. A
``self_managed`` recipe (seed 000 section 4.3: lemonpack never pre-downloads its weights) gets
the spec unchanged, the reference as text. :func:`oci_estimate` is the memory estimate of an
``oci://`` main checkpoint read from the artifact's GGUF header alone (the header-only fetch of
the pull module, or the file already in the store), before any weight is fetched.
:func:`pin_checkpoint` resolves ``oci://HOST/REPO:TAG`` to its digest (``models pin``).
"""

from __future__ import annotations

import os
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lemonpack.errors import InputError, LemonpackError, NotFoundError, UnreadableFileError
from lemonpack.oci.reference import InvalidReferenceError
from lemonpack.runtime.models.registry import OCI_SCHEME  # the one spelling of the scheme, with its rule

if TYPE_CHECKING:
    from lemonpack.contract.model import Recipe
    from lemonpack.runtime.launch.modelfiles import ModelSpec
    from lemonpack.runtime.models.memory import Estimate
    from lemonpack.runtime.models.registry import ModelEntry, ModelRegistry
    from lemonpack.runtime.selection.selector import ModelArtifact


@dataclass(frozen=True)
class ResolvedModel:
    """What a model argument named: ``ref`` as given; ``path`` the resolved local file or
    bundle directory (None for a registered model); ``entry`` the registry entry (None for
    a file); ``registry_path`` the registry file consulted (None when it was not read)."""

    ref: str
    path: Path | None = None
    entry: ModelEntry | None = None
    registry_path: Path | None = None

    @property
    def recipe(self) -> str | None:
        """The recipe a registered model is registered for (None for a file)."""
        return getattr(self.entry, "recipe", None)

    @property
    def backend(self) -> str | None:
        """A registered model's backend override for the selector (None for a file)."""
        return getattr(self.entry, "backend", None)

    @property
    def backend_source(self) -> str | None:
        """Where :attr:`backend` comes from (``REGISTRY ["NAME"].backend``), for messages."""
        return f'{self.registry_path} ["{self.ref}"].backend' if self.entry is not None else None

    @property
    def main(self) -> str:
        """The main checkpoint: the file's path, or the entry's ``main`` (a path or hub ref)."""
        if self.path is not None:
            return str(self.path)
        assert self.entry is not None  # a ResolvedModel names a file or an entry
        return str(self.entry.main)

    def spec(self) -> ModelSpec:
        """The launch's :class:`~lemonpack.runtime.launch.modelfiles.ModelSpec`: a file is checkpoint
        ``main`` named after its stem, in its own directory; an entry is taken as it is.
        Raises LemonpackError for an endpoint model: engines lemonpack does not spawn serve it
        (``lemonpack serve`` is its gateway), so there is nothing to launch."""
        from lemonpack.runtime.launch.modelfiles import ModelSpec

        if self.entry is not None and getattr(self.entry, "endpoints", None):
            raise InputError(f"model {self.entry.name!r} is served by its endpoints "
                             f"({', '.join(self.entry.endpoints)}); lemonpack run does not start it "
                             "(lemonpack serve is its gateway)")
        if self.entry is not None:
            return ModelSpec.from_entry(self.entry)
        path = Path(self.main)
        return ModelSpec(name=path.stem, checkpoints={"main": str(path)}, model_dir=str(path.parent))

    def artifact(self, *, offline: bool = False) -> ModelArtifact:
        """The selector's :class:`~lemonpack.runtime.selection.selector.ModelArtifact` (file names the
        selector matches recipes' artifact patterns against): for an ``oci://`` main checkpoint
        the names of the artifact's files, main first (:func:`oci_file_names`; with ``offline``
        from the model store only)."""
        from lemonpack.runtime.selection.selector import ModelArtifact, model_artifact

        if self.main.startswith(OCI_SCHEME):  # the artifact's file names, from its manifest (no weights)
            return ModelArtifact(self.ref, oci_file_names(self.main, offline=offline))
        return model_artifact(self.ref, self.main)

    def memory(self, recipe: Recipe | None = None,
               options: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """The serve admission estimate of the main file (:mod:`lemonpack.runtime.models.memory`)
        at the context size and KV cache types a launch of it with ``recipe`` (the recipe that
        serves it; None: none known) and the load ``options`` would use: the one merge,
        :func:`lemonpack.runtime.launch.options.launch_options` (the recipe's
        ``custom_options`` defaults and ``recipe_options``, the entry's ``recipe_options``,
        ``options``), read by :func:`~lemonpack.runtime.launch.options.memory_options`.
        ``{"bytes", "weights", "kv", "floor", "ctx_size", "how"}`` (``floor``: the engine's own,
        :func:`~lemonpack.runtime.models.memory.engine_floor` of ``recipe``); an ``oci://`` main
        checkpoint is estimated from its GGUF header (:func:`oci_estimate`: the header fetched
        alone, never for a ``self_managed`` recipe). None when the main file is not local or
        cannot be estimated, or an option value is one the launch would refuse."""
        from lemonpack.runtime.launch.options import launch_options, memory_options
        from lemonpack.runtime.models.memory import engine_floor, estimate_model

        path = self.path if self.path is not None else Path(os.path.expanduser(self.main))
        try:
            mem = memory_options(launch_options(recipe, getattr(self.entry, "recipe_options", None), options))
            if self.main.startswith(OCI_SCHEME):
                if recipe is not None and recipe.model_management == "self_managed":
                    return None  # its engine fetches its own weights: lemonpack fetches nothing for it
                est = oci_estimate(self.main, mem.ctx_size, mem.cache_type_k, mem.cache_type_v)
                if est is not None:
                    est = dataclasses.replace(est, floor=engine_floor(recipe))
            elif not path.exists():
                return None
            else:
                est = estimate_model(str(path), mem.ctx_size, mem.cache_type_k, mem.cache_type_v, engine_floor(recipe))
        except LemonpackError:
            return None
        if est is None:
            return None
        return {"bytes": est.total, "weights": est.weights, "kv": est.kv, "floor": est.floor,
                "ctx_size": mem.ctx_size, "how": est.how}


def resolve_model(ref: str, *, directories: bool = False, registry: ModelRegistry | None = None,
                  paths: str = "any", entries: Mapping[str, ModelEntry] | None = None) -> ResolvedModel:
    """What the model argument ``ref`` names, by the rule of the module docstring.

    ``directories``: accept an existing directory as a model bundle (``select``, ``serve``);
    ``run`` leaves it False (one checkpoint file). ``registry``: the model registry to consult
    (default :class:`~lemonpack.runtime.models.registry.ModelRegistry` at its default path; it is
    read only when ``ref`` is not an existing file and holds no path separator); ``entries``:
    the registered models already read (``serve`` keeps the last good registry), instead of
    reading ``registry``. ``paths``: ``"any"`` (a path as given), ``"absolute"`` (only an
    absolute or ``~``-based path names a file) or ``"none"`` (no file: registered names
    only, and no path is looked at). Raises :class:`~lemonpack.errors.LemonpackError`
    (exit 1) as described there, and what reading a broken registry raises."""
    from lemonpack.runtime.models.registry import ModelRegistry, looks_like_path

    if paths not in ("any", "absolute", "none"):
        raise ValueError(f"paths must be 'any', 'absolute' or 'none', not {paths!r}")
    text = os.path.expanduser(ref) if paths == "absolute" else ref
    path = Path(text)
    local = paths == "any" or (paths == "absolute" and os.path.isabs(text))
    if local and path.is_file():
        return ResolvedModel(ref, path=path.resolve())
    reg = None
    if "/" not in ref and os.sep not in ref and ref:
        reg = registry if registry is not None else (ModelRegistry() if entries is None else None)
        entry = (entries if entries is not None else reg.load() if reg is not None else {}).get(ref)
        if entry is not None:
            return ResolvedModel(ref, entry=entry, registry_path=reg.path if reg is not None else None)
    if local and path.exists():
        if directories:
            return ResolvedModel(ref, path=path.resolve())
        raise UnreadableFileError(f"model path is not a file: {ref}")
    if looks_like_path(ref) or (reg is None and entries is None):
        raise UnreadableFileError(f"model file not found: {ref}")
    where = f" in {reg.path}" if reg is not None else ""
    raise NotFoundError(f"no model file or registered model named {ref!r}{where}")


def oci_checkpoints(spec: ModelSpec) -> dict[str, str]:
    """The ``oci://`` checkpoints of ``spec``: ``{checkpoint name: reference}`` (empty: none)."""
    return {k: v for k, v in spec.checkpoints.items() if isinstance(v, str) and v.startswith(OCI_SCHEME)}


def _checked(reference: str) -> str:
    """``reference`` (``oci://...``) when it is pinned by digest and names a registry host;
    else :class:`~lemonpack.errors.InputError` with the registry's reason."""
    from lemonpack.runtime.models.registry import oci_checkpoint_problem

    why = oci_checkpoint_problem(reference)
    if why:
        raise InputError(why)
    return reference


def artifact_file(artifact: Any, checkpoint: str, reference: str) -> str:
    """The name (relative path in the store's view, and in an image volume or a modelcar's
    ``/models``) of the file of ``artifact`` (a :class:`~lemonpack.runtime.models.artifact.ModelArtifact`)
    an engine is handed for ``checkpoint``: for ``main``, the artifact's main weight file (of a
    split GGUF the ``-00001-of-`` part: llama.cpp opens the others beside it); for another
    checkpoint (``mmproj`` ...), the one raw file whose role is that name. Raises
    :class:`InputError` naming the files found when there is none."""
    raw = [f for f in artifact.files if f.archive is None]
    if checkpoint == "main" and artifact.main is not None and artifact.main.archive is None:
        return str(artifact.main.name)
    roles = [f for f in raw if f.role == checkpoint]
    if len(roles) == 1:
        return str(roles[0].name)
    found = ", ".join(f"{f.name} ({f.role})" for f in raw) or "none"
    raise InputError(f"checkpoint {checkpoint!r}: the artifact {reference} has no single file for it "
                     f"(files: {found})")


def launch_checkpoints(spec: ModelSpec, recipe: Recipe | None = None) -> dict[str, str]:
    """The ``oci://`` checkpoints a launch of ``spec`` with ``recipe`` pulls (and the trust policy
    judges first), ``{checkpoint name: reference}``: none when ``recipe`` manages its own
    weights (``model_management: self_managed``). The rule :func:`fetch_checkpoints` follows, for
    a caller that only judges them (``serve``'s trust check: no pull). Raises
    :class:`InputError` for a reference not pinned by digest."""
    if recipe is not None and recipe.model_management == "self_managed":
        return {}
    return {name: _checked(reference) for name, reference in oci_checkpoints(spec).items()}


def fetch_checkpoints(spec: ModelSpec, recipe: Recipe | None = None, *, offline: bool = False,
                      progress: Any = False, store: Any = None, trust: Any = None) -> ModelSpec:
    """``spec`` with every ``oci://`` checkpoint replaced by its file in the model store (module
    docstring), pulling what the store lacks; ``spec`` itself when it has none, or when
    ``recipe`` manages its own weights (``model_management: self_managed``, seed 000 section
    4.3: never pre-fetched). ``offline``: fetch nothing (a model not in the store is a
    :class:`~lemonpack.errors.NotFoundError`, exit 1, as a missing model file is); ``progress``: a progress bar on stderr while
    blobs download (or ``callback(done, total)``: :func:`lemonpack.runtime.models.pull.progress_lines`
    for a log); ``store``: the model store (default: the user's cache); ``trust``: the
    :class:`lemonpack.trust.check.Trust` each reference is judged by before it is fetched
    (issue 24: the same containers-policy.json as engine images; None: the default places,
    read once; with ``offline`` nothing is fetched, so nothing is judged: the store holds only
    what a pull that was judged put there, or what ``models pull`` fetched). Raises
    :class:`InputError` (an unpinned reference), :class:`~lemonpack.errors.TrustError` (exit 3:
    the policy rejects it; nothing fetched), and what
    :func:`lemonpack.runtime.models.pull.pull_model` raises: :class:`~lemonpack.errors.FetchError`
    (exit 4: network, registry), :class:`~lemonpack.errors.IntegrityError` (exit 3: a blob
    that does not match its digest; nothing of it is visible in the store), a refusal of an
    unknown artifact format."""
    from lemonpack.runtime.launch.modelfiles import ModelSpec

    refs = launch_checkpoints(spec, recipe)
    if not refs:
        return spec
    checkpoints = dict(spec.checkpoints)
    model_dir = spec.model_dir
    if not offline and trust is None:
        from lemonpack.trust.check import Trust

        trust = Trust.load()
    for name, reference in refs.items():
        pulled = _pull(reference, offline=offline, progress=progress, store=store, trust=None if offline else trust,
                       use=checkpoint_use(spec.name, name))  # judged through the pull's client
        checkpoints[name] = path = str(pulled.files[artifact_file(pulled.artifact, name, reference)])
        if name == "main" or len(spec.checkpoints) == 1:
            model_dir = os.path.dirname(path)
    return ModelSpec(name=spec.name, checkpoints=MappingProxyType(checkpoints), recipe_options=spec.recipe_options,
                     mode=spec.mode, model_dir=model_dir)


def checkpoint_use(model: str, checkpoint: str) -> str:
    """What a trust refusal of a checkpoint names: ``model 'user.x' checkpoint 'main'``."""
    return f"model {model!r} checkpoint {checkpoint!r}"


def _pull(reference: str, *, offline: bool, progress: Any, store: Any, trust: Any = None, use: str = "") -> Any:
    """:func:`~lemonpack.runtime.models.pull.pull_model` of ``reference`` (judged by ``trust``
    first, through the pull's client); an offline refusal says how to fetch it."""
    from lemonpack.runtime.models.pull import pull_model
    from lemonpack.runtime.models.store import ModelStore

    try:
        return pull_model(reference, store=store if store is not None else ModelStore(), offline=offline,
                          progress=progress, trust=trust, use=use)
    except NotFoundError as e:
        if offline:
            raise NotFoundError(f"{e} (fetch it first: lemonpack models pull {reference})") from None
        raise


def oci_estimate(reference: str, ctx_size: int = 4096, cache_type_k: str = "f16", cache_type_v: str = "f16", *,
                 offline: bool = False, store: Any = None) -> Estimate | None:
    """The memory estimate (:func:`lemonpack.runtime.models.memory.estimate_gguf`) of the GGUF
    main file of the artifact ``reference``, read from its header only: the store's copy when
    the artifact was pulled, else the header bytes fetched alone (no weight is fetched; with
    ``offline`` nothing at all). None when it cannot be known that way (offline and not
    pulled, no GGUF layer). Raises :class:`InputError` for an unpinned reference and what the
    header fetch raises (:class:`~lemonpack.errors.FetchError`, :class:`~lemonpack.errors.IntegrityError`)."""
    from lemonpack.runtime.models.memory import estimate_gguf
    from lemonpack.runtime.models.pull import fetch_gguf_header
    from lemonpack.runtime.models.store import ModelStore

    try:
        header = fetch_gguf_header(_checked(reference), store=store if store is not None else ModelStore(),
                                   offline=offline)
    except NotFoundError:
        if offline:
            return None
        raise
    return estimate_gguf(str(header.path), ctx_size, cache_type_k, cache_type_v)


@dataclass(frozen=True)
class OciModelFacts:
    """What a pod spec needs of an ``oci://`` model without its weights: ``files`` (checkpoint
    name -> the file's name in the artifact, :func:`artifact_file`) and ``memory`` (the
    admission estimate in bytes from the main file's GGUF header at the launch's options;
    None when the main file is no GGUF)."""

    files: Mapping[str, str]
    memory: int | None


def oci_model_facts(spec: ModelSpec, recipe: Recipe | None = None, *, offline: bool = False,
                    store: Any = None) -> OciModelFacts | None:
    """:class:`OciModelFacts` of ``spec`` when its ``main`` checkpoint is ``oci://`` (None
    otherwise): the artifact's manifest and config and the main file's GGUF header only
    (:func:`lemonpack.runtime.models.pull.fetch_gguf_header`, kept in the model store), never the
    weights. Every checkpoint must be ``oci://`` (one model, one volume). Raises
    :class:`InputError` (a checkpoint that is a local path or a hub reference beside it, an
    unpinned reference, no file for a checkpoint) and what the header fetch raises."""
    refs = oci_checkpoints(spec)
    if "main" not in refs:
        return None
    from lemonpack.runtime.launch.options import launch_options, memory_options
    from lemonpack.runtime.models.artifact import manifest_config, read_artifact
    from lemonpack.runtime.models.memory import estimate_gguf
    from lemonpack.runtime.models.pull import fetch_gguf_header
    from lemonpack.runtime.models.store import ModelStore

    others = sorted(set(spec.checkpoints) - set(refs))
    if others:
        raise InputError(f"model {spec.name!r}: checkpoint {others[0]!r} is not oci:// beside an oci:// main "
                         "checkpoint; a pod mounts one artifact: put every file in it")
    store = store if store is not None else ModelStore()
    files: dict[str, str] = {}
    memory = None
    for name, reference in refs.items():
        header = fetch_gguf_header(_checked(reference), store=store, offline=offline)
        manifest = store.read(header.manifest_digest)
        config = store.read(manifest_config(manifest).digest) if manifest is not None else None
        if manifest is None or config is None:
            raise InputError(f"checkpoint {name!r}: {reference}: the manifest is not in the model store")
        files[name] = artifact_file(read_artifact(manifest, config), name, reference)
        if name == "main":
            mem = memory_options(launch_options(recipe, spec.recipe_options, None))
            memory = estimate_gguf(str(header.path), mem.ctx_size, mem.cache_type_k, mem.cache_type_v).total
    return OciModelFacts(MappingProxyType(files), memory)


def oci_file_names(reference: str, *, offline: bool = False, store: Any = None) -> tuple[str, ...]:
    """The names of the files of the artifact ``reference`` (``oci://``), its main weight file
    first: what the selector matches recipes' ``*.gguf`` patterns against. Read from the manifest
    and config (the store's copy, or fetched with the GGUF header alone: never the weights).
    Raises :class:`InputError` for an unpinned reference and what the header fetch raises."""
    from lemonpack.runtime.models.artifact import manifest_config, read_artifact
    from lemonpack.runtime.models.pull import fetch_gguf_header
    from lemonpack.runtime.models.store import ModelStore

    store = store if store is not None else ModelStore()
    header = fetch_gguf_header(_checked(reference), store=store, offline=offline)
    manifest = store.read(header.manifest_digest)
    config = store.read(manifest_config(manifest).digest) if manifest is not None else None
    if manifest is None or config is None:
        return (header.file.name,)
    names = [f.name for f in read_artifact(manifest, config).files]
    return tuple(dict.fromkeys([header.file.name, *names]))


def pin_checkpoint(reference: str, *, insecure: bool = False, registry_config: str | None = None) -> str:
    """``oci://HOST/REPO[:TAG]`` with the digest its tag names now (``oci://HOST/REPO:TAG@sha256:HEX``;
    no tag: ``latest``): one GET of the manifest, whose digest is the sha256 of the bytes received
    (:func:`lemonpack.runtime.models.pull.resolve_model`), as ``lemonpack pin`` does for images
    (:mod:`lemonpack.registry.pin`); a reference already pinned is checked and returned as given.
    Raises :class:`InputError` (not ``oci://``, malformed), :class:`~lemonpack.errors.FetchError`
    (no such tag, network, auth), :class:`~lemonpack.errors.IntegrityError`."""
    from lemonpack.runtime.models.pull import resolve_model as resolve_reference

    if not reference.startswith(OCI_SCHEME):
        raise InputError(f"model reference {reference!r} is not oci://HOST[:PORT]/REPO[:TAG]")
    if "@" in reference:
        return _checked(reference)
    try:
        pinned = resolve_reference(reference, insecure=insecure, registry_config=registry_config)
    except InvalidReferenceError as e:
        raise InputError(str(e)) from None
    tagged = pinned if pinned.tag else pinned.with_ref(tag="latest", digest=pinned.digest)
    return f"{OCI_SCHEME}{tagged}"


__all__ = ["OCI_SCHEME", "OciModelFacts", "ResolvedModel", "artifact_file", "checkpoint_use", "fetch_checkpoints",
           "launch_checkpoints", "oci_checkpoints",
           "oci_estimate", "oci_file_names", "oci_model_facts", "pin_checkpoint",
           "resolve_model"]
