"""The server's model catalog: registered models bound to discovered recipes (RFC sections 8, 10).

A model served by ``lemonpack serve`` is an entry of the user model registry
(``user_models.json``, :mod:`lemonpack.runtime.models`) whose recipe id is one that
discovery loaded (:mod:`lemonpack.runtime.discovery`), resolved the way ``lemonpack run``
resolves a registered model name (:meth:`ModelSpec.from_entry`, then
:func:`~lemonpack.runtime.launch.build_launch_plan` on this host). Discovery results come
from a :class:`~lemonpack.runtime.discovery.DiscoveryWatcher`, so recipes added or removed
on disk are picked up without a restart; the registry is re-read on each look-up (it is a
small JSON file written atomically).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from lemonpack.contract.model import Recipe
from lemonpack.errors import LemonpackError
from lemonpack.runtime.discovery import DiscoveryResult, DiscoveryWatcher
from lemonpack.runtime.launch import ModelSpec, build_launch_plan
from lemonpack.runtime.models import ModelRegistry
from lemonpack.runtime.plan import LaunchPlan


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

    @property
    def capabilities(self) -> tuple[str, ...]:
        """The recipe's declared capabilities (empty without a recipe)."""
        return self.recipe.capabilities if self.recipe is not None else ()


def free_port(host: str, avoid: frozenset[int] = frozenset()) -> int:
    """A TCP port free on ``host`` a moment ago, never one of ``avoid`` (the listen port:
    an engine port equal to it is impossible by construction)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    while True:
        with socket.socket(family) as s:
            s.bind((host if host not in ("0.0.0.0", "::") else "", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port


class Catalog:
    """Registered models x discovered recipes, and the launch plan of each.

    ``registry`` is the :class:`ModelRegistry` (default: the user's); ``watcher`` a
    :class:`DiscoveryWatcher` (default: the search path, not started: :meth:`start`);
    ``host_facts`` the :class:`~lemonpack.contract.host.HostFacts` (default: detected);
    ``engine_host`` where engines listen; ``avoid_ports`` ports an engine must never get.
    """

    def __init__(self, registry: ModelRegistry | None = None, watcher: DiscoveryWatcher | None = None, *,
                 host_facts=None, engine_host: str = "127.0.0.1", avoid_ports: frozenset[int] = frozenset()):
        from lemonpack.contract import detect_host

        self.registry = registry or ModelRegistry()
        self.watcher = watcher or DiscoveryWatcher()
        self.facts = host_facts if host_facts is not None else detect_host()
        self.engine_host = engine_host
        self.avoid_ports = avoid_ports

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
        for name, entry in sorted(self.registry.load().items()):
            rec = found.get(entry.recipe)
            problem = None if rec is not None else f"recipe {entry.recipe!r} is not discovered"
            out.append(ServedModel(name, entry.recipe, rec.recipe if rec else None,
                                   ModelSpec.from_entry(entry), problem))
        return out

    def get(self, name: str) -> ServedModel:
        """The model ``name``; raises :class:`ModelNotFound`."""
        entry = self.registry.load().get(name)
        if entry is None:
            raise ModelNotFound(f"model {name!r} is not registered (lemonpack models add)")
        rec = self.discovery().get(entry.recipe)
        problem = None if rec is not None else f"recipe {entry.recipe!r} is not discovered"
        return ServedModel(name, entry.recipe, rec.recipe if rec else None, ModelSpec.from_entry(entry), problem)

    def plan(self, name: str) -> LaunchPlan:
        """A fresh launch plan for ``name`` on a free port (called at each engine start).
        Raises :class:`ModelNotFound` or the launch errors of ``build_launch_plan``."""
        m = self.get(name)
        if m.recipe is None:
            raise LemonpackError(f"model {name!r}: {m.problem}")
        port = free_port(self.engine_host, self.avoid_ports)
        return build_launch_plan(m.recipe, m.spec, self.facts, port=port, host_addr=self.engine_host,
                                 install_ref=m.recipe_id)
