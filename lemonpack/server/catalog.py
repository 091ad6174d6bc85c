"""The server's model catalog: registered models bound to discovered recipes (RFC sections 8, 10).

A model served by ``lemonpack serve`` is an entry of the user model registry
(``user_models.json``, :mod:`lemonpack.runtime.models.registry`) whose recipe id is one that
discovery loaded (:mod:`lemonpack.runtime.recipes.discovery`), resolved the way ``lemonpack run``
resolves a registered model name (:meth:`ModelSpec.from_entry`, then
:func:`~lemonpack.runtime.launch.build.build_launch_plan` on this host). Discovery results come
from a :class:`~lemonpack.runtime.recipes.watch.DiscoveryWatcher`, so recipes added or removed
on disk are picked up without a restart; the registry is re-read on each look-up (it is a
small JSON file written atomically).

Backend selection (seed 001 section 2.3, :mod:`lemonpack.runtime.selection.selector`): a request may
also name a model *file* (an existing path); its recipe is the one
:func:`~lemonpack.runtime.selection.selector.select_backend` picks among the discovered recipes (the
``dev.lemonpack.serves`` / ``dev.lemonpack.rank`` extensions keys), with the hard override
``LEMONPACK_BACKEND``. A registered model keeps its registered recipe unless an override
(``LEMONPACK_BACKEND``, else the entry's ``backend``) names another: a recipe outcome
replaces it, the default outcome keeps the registered recipe, a hard error raises
:class:`~lemonpack.runtime.selection.selector.BackendSelectionError` (HTTP 400
``backend_selection_error``). The override is read at each look-up; an engine already
running keeps the recipe it was started with until it is unloaded.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lemonpack.contract.model import Recipe
from lemonpack.errors import InputError, LemonpackError, NotFoundError
from lemonpack.runtime.engines.ports import free_port
from lemonpack.runtime.recipes.discovery import DiscoveryResult
from lemonpack.runtime.recipes.watch import DiscoveryWatcher
from lemonpack.runtime.launch.build import build_launch_plan, launch_images
from lemonpack.runtime.launch.modelfiles import ModelSpec
from lemonpack.runtime.models.ref import fetch_checkpoints, launch_checkpoints, resolve_model
from lemonpack.runtime.models.pull import progress_lines
from lemonpack.runtime.models.registry import ModelEntry, ModelRegistry
from lemonpack.runtime.launch.plan import LaunchPlan
from lemonpack.runtime.lifecycle.runner import ModelReferences
from lemonpack.runtime.selection.presence import gather_presence
from lemonpack.server.body import shown
from lemonpack.runtime.selection.selector import (
    OVERRIDE_ENV, BackendSelectionError, Selection, discovery_order, effective_override, model_artifact, select_backend,
)

log = logging.getLogger("lemonpack.server")

#: Seconds a presence fact (binary / image present) is reused before looking again.
PRESENCE_TTL = 10.0


def _overridden() -> bool:
    """Whether ``$LEMONPACK_BACKEND`` (``OVERRIDE_ENV``) is set and not empty:
    ``os.environ.get`` without the two KeyErrors it raises when it is not (the request's hot path
    asks on every request): the environment's own mapping when ``os.environ`` is the usual
    one, else its ``get``."""
    env = os.environ
    data = getattr(env, "_data", None) if type(env) is os._Environ else None
    if data is None:
        return bool(env.get(OVERRIDE_ENV))
    return bool(data.get(_OVERRIDE_KEY))


_OVERRIDE_KEY = os.environ.encodekey(OVERRIDE_ENV) if type(os.environ) is os._Environ else OVERRIDE_ENV


class ModelNotFound(LemonpackError):
    """The model is not registered (HTTP 404 ``model_not_found``)."""


@dataclass(frozen=True)
class ServedModel:
    """One model the server can route to: ``name``, its ``recipe`` (None when the recipe id
    it names is not discovered: ``problem`` says why) and the registry ``spec``."""

    name: str
    recipe_id: str
    recipe: Recipe | None
    spec: ModelSpec
    problem: str | None = None
    selection: Selection | None = None
    endpoints: tuple[str, ...] = ()

    @property
    def remote(self) -> bool:
        """Served by engines lemonpack does not spawn (the registry's ``endpoints``)."""
        return bool(self.endpoints)

    @property
    def capabilities(self) -> tuple[str, ...]:
        """The recipe's declared capabilities (empty without a recipe)."""
        return self.recipe.capabilities if self.recipe is not None else ()


class Catalog:
    """Registered models x discovered recipes, and the launch plan of each.

    ``registry`` is the :class:`ModelRegistry` (default: the user's); ``watcher`` a
    :class:`DiscoveryWatcher` (default: the search path, not started: :meth:`start`);
    ``host_facts`` the :class:`~lemonpack.contract.host.HostFacts` (default: detected);
    ``engine_host`` where engines listen; ``avoid_ports`` ports an engine must never get.
    """

    def __init__(self, registry: ModelRegistry | None = None, watcher: DiscoveryWatcher | None = None, *,
                 host_facts=None, engine_host: str = "127.0.0.1", avoid_ports: frozenset[int] = frozenset(),
                 model_files: bool = True, offline: bool = False, progress: bool = False, trust: Any = None):
        """``model_files``: whether a request may name a model file by its absolute path
        (``lemonpack serve`` allows it only when it listens on a loopback address: a remote
        client must not point an engine at any file of this machine). ``offline``: an
        ``oci://`` checkpoint is never fetched (it must be in the model store); ``progress``:
        show a pull of one (:meth:`plan`): a bar when stderr is a terminal, else a line per 10%
        (and every 10 s) in the server's log; ``trust``: the
        :class:`lemonpack.trust.check.Trust` an ``oci://`` checkpoint is judged by before it is
        fetched (None: the default places)."""
        from lemonpack.contract import detect_host

        self.registry = registry or ModelRegistry()
        self.watcher = watcher or DiscoveryWatcher()
        self.facts = host_facts if host_facts is not None else detect_host()
        self.engine_host = engine_host
        self.avoid_ports = avoid_ports
        self.model_files = model_files
        self.offline, self.progress, self.trust = offline, progress, trust
        self._presence: tuple[float, object, dict] | None = None
        self._presence_lock = threading.Lock()
        self._last_good: Mapping[str, ModelEntry] = {}
        #: Why the model registry file cannot be read right now (None when it can): the
        #: server keeps serving the last good registry and says so on /v1/models.
        self.registry_problem: str | None = None
        #: Load options by model (``POST /v1/load``): used by every later start of it.
        self.load_options: dict[str, dict] = {}
        #: registered models without a backend override, resolved: name -> (the registry
        #: mapping and discovery result it was resolved from, the ServedModel); both are kept
        #: objects that are replaced when their files change, so a hit is never stale
        self._served: dict[str, tuple[object, object, ServedModel]] = {}

    def entries(self) -> Mapping[str, ModelEntry]:
        """The registered models by name. When ``user_models.json`` cannot be read or parsed
        (a half-written edit, a syntax error), the last good registry (empty at first) is
        returned, :attr:`registry_problem` says why, and a warning is logged once per
        distinct problem: a broken registry must not take the server down."""
        try:
            entries = self.registry.load()
        except LemonpackError as e:
            if str(e) != self.registry_problem:
                log.warning("%s; serving the last good model registry until it is fixed", e)
            self.registry_problem = str(e)
            return self._last_good
        if self.registry_problem is not None:
            log.warning("model registry %s readable again", self.registry.path)
        self.registry_problem = None
        self._last_good = entries
        return entries

    def start(self) -> "Catalog":
        """Start the discovery watcher thread; returns self."""
        self.watcher.start()
        return self

    def stop(self) -> None:
        """Stop the discovery watcher."""
        self.watcher.stop()

    def discovery(self) -> DiscoveryResult:
        """The latest discovery result."""
        return self.watcher.current()

    def models(self) -> list[ServedModel]:
        """Every registered model, in name order, with its recipe when discovered."""
        found = self.discovery()
        out = []
        for name, entry in sorted(self.entries().items()):
            rec = found.get(entry.recipe)
            problem = None if rec is not None else f"recipe {entry.recipe!r} is not discovered"
            out.append(ServedModel(name, entry.recipe, rec.recipe if rec else None,
                                   ModelSpec.from_entry(entry), problem, endpoints=entry.endpoints))
        return out

    def resolved(self, name: str) -> ServedModel | None:
        """The :class:`ServedModel` :meth:`get` resolved for registered model ``name`` when
        neither the registry nor discovery changed since (one ``stat`` of the registry, no
        probe: the request's hot path), else None (then :meth:`get`)."""
        hit = self._served.get(name)
        if hit is None:
            return None
        found = self.discovery()
        entries = self.entries()
        if hit[0] is entries and hit[1] is found and not _overridden():
            return hit[2]
        return None

    def get(self, name: str) -> ServedModel:
        """The model ``name``: a registered model, or an existing model file or bundle
        directory (module docstring). Raises :class:`ModelNotFound`, or
        :class:`BackendSelectionError` when an override cannot be honoured or no recipe
        serves a model file."""
        found = self.discovery()
        entries = self.entries()
        hit = self._served.get(name)
        if hit is not None and hit[0] is entries and hit[1] is found and not _overridden():
            return hit[2]  # the request's hot path: nothing changed since this name was resolved
        try:
            got = resolve_model(name, directories=True, paths="absolute" if self.model_files else "none",
                                entries=entries)
        except LemonpackError:
            if not self.model_files and os.path.isabs(os.path.expanduser(name)):
                # the same answer whether the path exists or not: no file-existence oracle
                raise ModelNotFound(f"model {shown(name)} is not registered (lemonpack models add); model files by "
                                    "path are served only when lemonpack serve listens on a loopback address") from None
            raise ModelNotFound(f"model {shown(name)} is not registered (lemonpack models add) and is not a model "
                                "file") from None
        entry = got.entry
        if entry is not None:
            spec = ModelSpec.from_entry(entry)
            override, source = effective_override(entry.backend, f'{self.registry.path} ["{name}"].backend')
            chosen: str = entry.recipe
            sel = None
            if override and not entry.endpoints:  # an endpoint model runs what its engine runs
                try:  # an oci:// model: its artifact's file names (read with its GGUF header, no weights)
                    artifact = got.artifact(offline=self.offline)
                except LemonpackError:
                    artifact = model_artifact(name, entry.main)
                sel = self._select(artifact, found, override, source or OVERRIDE_ENV).require()
                chosen = sel.serving_recipe(entry.recipe, ()) or entry.recipe
            found_rec = found.get(chosen)
            problem = None if found_rec is not None else f"recipe {chosen!r} is not discovered"
            served = ServedModel(name, chosen, found_rec.recipe if found_rec else None, spec, problem, sel,
                                 entry.endpoints)
            if not override:
                if len(self._served) >= 1024:
                    self._served.clear()
                self._served[name] = (entries, found, served)
            return served
        # one file, one model: its real path names the model, its engine and its metric label
        # (resolve_model's), however the request spelled it; the selector reads the file name
        # as named (a symlink of a hub cache keeps its file name) and the engine is given it
        path = os.path.abspath(os.path.expanduser(name))
        real = str(got.path) if got.path is not None else path
        override, source = effective_override(None, None)
        sel = self._select(model_artifact(name, path), found, override, source or OVERRIDE_ENV).require()
        rid = sel.serving_recipe(None, [r.id for r in discovery_order(found.recipes.values())])
        if sel.outcome == "default":
            default = sel.default
            if rid is None:
                raise BackendSelectionError(f"{name}: {sel.message}; the default ({default.name if default else ''}) is not a "
                                            f"discovered recipe here, so nothing serves this model file")
        if rid is None:  # not an outcome select_backend gives after require(); said plainly if it did
            raise BackendSelectionError(f"{name}: {sel.message}")
        rec = found.get(rid)
        spec = ModelSpec(name=real, checkpoints={"main": path})
        return ServedModel(real, rid, rec.recipe if rec else None, spec,
                           None if rec else f"recipe {rid!r} is not discovered", sel)

    @staticmethod
    def is_model_file(name: str) -> bool:
        """True when ``name`` is an existing file or directory path (absolute or ``~``-based):
        what :func:`~lemonpack.runtime.models.ref.resolve_model` takes for a file with
        ``paths="absolute"``."""
        p = os.path.expanduser(name)
        return os.path.isabs(p) and os.path.exists(p)

    def exists(self, name: str) -> bool:
        """Cheap: ``name`` is still registered with a discovered recipe, or still a model file
        (the server unloads an engine whose model or recipe went away)."""
        entry = self.entries().get(name)
        if entry is not None:
            return self.discovery().get(entry.recipe) is not None or bool(entry.backend or os.environ.get(OVERRIDE_ENV))
        return self.is_model_file(name)

    def may_probe(self, name: str) -> bool:
        """True when :meth:`get` of ``name`` may look at the disk or run ``podman image
        exists``: it needs a selection (an override is set, or ``name`` is not registered)
        and the presence facts are older than :data:`PRESENCE_TTL` or discovery changed. The
        server then calls :meth:`get` off its event loop."""
        if not os.environ.get(OVERRIDE_ENV, "").strip():
            entry = self.entries().get(name)
            if entry is not None and not entry.backend:
                return False
        p = self._presence
        return p is None or p[1] is not self.discovery() or time.monotonic() - p[0] > PRESENCE_TTL

    def _select(self, artifact, found: DiscoveryResult, override: str | None, source: str) -> Selection:
        recipes = [d.recipe for d in discovery_order(found.recipes.values())]
        with self._presence_lock:
            now = time.monotonic()
            if self._presence is None or self._presence[1] is not found or now - self._presence[0] > PRESENCE_TTL:
                self._presence = (now, found, gather_presence(recipes, self.facts))
            presence = self._presence[2]
        return select_backend(artifact, recipes, self.facts, presence, override=override, override_source=source)

    def judged_references(self, name: str) -> ModelReferences:
        """What a start of ``name`` takes from registries, for the runner's trust check before
        admission (its ``judged_references``): the engine images of the recipe :meth:`get`
        selects (:func:`~lemonpack.runtime.launch.build.launch_images`, from the block the plan
        would use) and the ``oci://`` checkpoints it pulls
        (:func:`~lemonpack.runtime.models.ref.launch_checkpoints`), without building the plan:
        no port, no weights, no file of this machine looked at. Raises what :meth:`plan` raises
        before it builds (an unknown model, an endpoint model, an undiscovered recipe, no block
        for the host, an unpinned checkpoint)."""
        m = self._startable(name)
        assert m.recipe is not None
        return ModelReferences(m.spec.name, m.recipe.recipe,
                               launch_images(m.recipe, m.spec, self.facts, options=self.load_options.get(name) or None),
                               launch_checkpoints(m.spec, m.recipe))

    def _startable(self, name: str) -> ServedModel:
        """:meth:`get` of a model lemonpack starts: an endpoint model or an undiscovered recipe refused."""
        m = self.get(name)
        if m.remote:
            raise InputError(f"model {name!r} is served by its endpoints ({', '.join(m.endpoints)}); "
                           "lemonpack does not start it")
        if m.recipe is None:
            raise NotFoundError(f"model {name!r}: {m.problem}")
        return m

    def plan(self, name: str) -> LaunchPlan:
        """A fresh launch plan for ``name`` on a free port (called at each engine start, in the
        runner's start worker). An ``oci://`` checkpoint is pulled into the model store first
        when the store lacks it, and the engine gets the store's path
        (:func:`lemonpack.runtime.models.ref.fetch_checkpoints`; never for a ``self_managed``
        recipe, nothing with ``offline``). Raises :class:`ModelNotFound`, the launch errors of
        ``build_launch_plan`` and the pull's (a failed start the server reports)."""
        m = self._startable(name)
        assert m.recipe is not None
        progress: Any = self.progress
        if progress and not sys.stderr.isatty():  # a log, not a terminal: lines a log keeps, not a bar
            progress = progress_lines(f"model {name}: pulling", log.info)
        spec = fetch_checkpoints(m.spec, m.recipe, offline=self.offline, progress=progress, trust=self.trust)
        port = free_port(self.engine_host, self.avoid_ports)
        return build_launch_plan(m.recipe, spec, self.facts, port=port, host_addr=self.engine_host,
                                 install_ref=m.recipe_id, options=self.load_options.get(name) or None)
