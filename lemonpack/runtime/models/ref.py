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
   the registry is not named, it was not what the user meant), else "no model named REF: no
   model file or registered model named REF in REGISTRY".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lemonpack.errors import InputError, LemonpackError, NotFoundError, UnreadableFileError

if TYPE_CHECKING:
    from lemonpack.contract.model import Recipe
    from lemonpack.runtime.launch.modelfiles import ModelSpec
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

    def artifact(self) -> ModelArtifact:
        """The selector's :class:`~lemonpack.runtime.selection.selector.ModelArtifact` (file names the
        selector matches recipes' artifact patterns against)."""
        from lemonpack.runtime.selection.selector import model_artifact

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
        :func:`~lemonpack.runtime.models.memory.engine_floor` of ``recipe``); None when the main file is not local
        or cannot be estimated, or an option value is one the launch would refuse."""
        from lemonpack.runtime.launch.options import launch_options, memory_options
        from lemonpack.runtime.models.memory import engine_floor, estimate_model

        path = self.path if self.path is not None else Path(os.path.expanduser(self.main))
        if not path.exists():
            return None
        try:
            mem = memory_options(launch_options(recipe, getattr(self.entry, "recipe_options", None), options))
            est = estimate_model(str(path), mem.ctx_size, mem.cache_type_k, mem.cache_type_v, engine_floor(recipe))
        except LemonpackError:
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
    raise NotFoundError(f"no model named {ref!r}: no model file or registered model named {ref!r}{where}")


__all__ = ["ResolvedModel", "resolve_model"]
