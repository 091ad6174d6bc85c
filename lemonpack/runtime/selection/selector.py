"""The backend selector: which recipe serves a model (seed 001 section 2.3, applied to recipes).

When more than one discovered recipe could serve a model, :func:`select_backend` picks one
the way seed 001's ``llm_backend_select`` does, over three per-recipe questions:

- ``available()``: the recipe has a platform block for this host (:class:`HostFacts`: a
  block for the host OS whose accelerator the host has; the block section 9 would choose,
  else the first in section 9's detection order the host has) *and* its artifact is
  present (the ``variant_of`` binary under ``<cache>/external/<recipe>/``, the container
  image of a passthrough ``podman run``, or the passthrough command). Presence is a fact
  passed in (:class:`Presence`); :func:`gather_presence` is the one place that looks.
- ``can_serve(model)``: a cheap check of the model artifact's names (:class:`ModelArtifact`:
  the base name of the ``main`` checkpoint, plus the top-level entries when it is a
  directory) against the glob patterns the recipe declares under
  ``extensions["dev.lemonpack.serves"]``.
- ``preference_rank()``: ``extensions["dev.lemonpack.rank"]``, an integer, default 0.

The recipe keys (in the contract's open ``extensions`` bag, section 4 / D8, namespaced so
they cannot clash with other tools' keys)::

    "extensions": {
      "dev.lemonpack.serves": ["*.gguf"],   # glob patterns, matched case-insensitively
      "dev.lemonpack.rank": 10              # integer; higher wins; default 0
    }

A recipe without ``dev.lemonpack.serves`` serves nothing through the selector (it is still
run by ``lemonpack run RECIPE``). A malformed value (not a list of non-empty strings without
``/``; a rank that is not an integer) makes the recipe unable to serve, with the JSON path in
the reason.

Resolution (seed 001 section 2.3):

1. A hard override: ``LEMONPACK_BACKEND`` (:data:`OVERRIDE_ENV`), else the model's
   ``backend`` field in the user model registry (:mod:`lemonpack.runtime.models.registry`); names
   compare case-insensitively. A name of the default (:data:`BUILTIN_DEFAULT`:
   ``llamacpp``, ``llama.cpp``, ``llama-cpp``) selects the default. Any other name must be a
   discovered recipe that is available and can serve the model; otherwise the result is a
   hard error saying which: ``unknown``, ``unavailable`` or ``cannot-serve``. Never a silent
   fallback.
2. No override: among the available recipes that can serve, the highest rank wins; ties go
   to the first discovered (the order the candidates are given in; see
   :func:`discovery_order`). When none qualifies, the default. The default is the implicit
   rank-0 fallback: it is not probed (the caller's built-in path reports its own failures)
   and it does not compete, so any qualifying recipe beats it, whatever its rank.

The result is a frozen :class:`Selection`: a recipe, the default, or a hard error, with one
:class:`CandidateReport` per candidate saying why it was taken or not. The decision is pure
(no I/O): recipes, host facts, presence facts and the model artifact are all passed in.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lemonpack.contract.host import DETECTION_ORDER, HostFacts
from lemonpack.contract.model import Recipe
from lemonpack.contract.select import EffectiveBlock, block_for_arch, select_accelerator
from lemonpack.errors import LemonpackError, SelectionError

#: The environment variable of the hard override.
OVERRIDE_ENV = "LEMONPACK_BACKEND"
#: ``extensions`` key: glob patterns of the model artifacts a recipe serves.
SERVES_KEY = "dev.lemonpack.serves"
#: ``extensions`` key: the recipe's preference rank (integer, higher wins, default 0).
RANK_KEY = "dev.lemonpack.rank"

#: Outcomes of a :class:`Selection`.
OUTCOMES = ("recipe", "default", "error")
#: Kinds of a hard error.
ERROR_KINDS = ("unknown", "unavailable", "cannot-serve")


def effective_override(model_backend: str | None, model_source: str | None) -> tuple[str | None, str | None]:
    """``(override, where it comes from)`` for one model: ``LEMONPACK_BACKEND`` when set
    (non-blank), else the registered model's ``backend`` field (``model_backend``, named by
    ``model_source``), else ``(None, None)``. The order of seed 001 section 2.3: the
    environment first."""
    env = os.environ.get(OVERRIDE_ENV, "").strip()
    if env:
        return env, OVERRIDE_ENV
    return (model_backend, model_source) if model_backend else (None, None)


@dataclass(frozen=True)
class DefaultBackend:
    """The implicit rank-0 fallback: ``name`` and the ``aliases`` an override may use for
    it (compared case-insensitively); ``description`` says what it is, for reports."""

    name: str
    aliases: tuple[str, ...] = ()
    description: str = ""

    def matches(self, text: str) -> bool:
        """True when ``text`` names this default (case-insensitive)."""
        t = text.strip().lower()
        return t == self.name.lower() or t in (a.lower() for a in self.aliases)


#: The built-in default: the host server's in-tree llama.cpp recipe (``llamacpp``, seed 001's
#: "llama.cpp" / "llamacpp" names). lemonpack runs no engine of its own for it: a caller maps
#: the default to its own path (for a registered model, its registered recipe).
BUILTIN_DEFAULT = DefaultBackend("llamacpp", ("llama.cpp", "llama-cpp"),
                                 "the built-in default (llama.cpp), the implicit rank-0 fallback")


@dataclass(frozen=True)
class ModelArtifact:
    """What ``can_serve`` looks at: ``ref`` the model as named (a file, a hub reference
    ``org/repo:file`` or a registered name) and ``names`` the file names to match (the
    base name of the ``main`` checkpoint; for a directory also its top-level entries)."""

    ref: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Presence:
    """Whether a recipe's artifact is present: ``present`` and ``what`` was checked
    (``binary /c/external/x/llama-server``, ``image quay.io/x@sha256:...``)."""

    present: bool
    what: str


@dataclass(frozen=True)
class CandidateReport:
    """One candidate's answers, in discovery order.

    ``available`` with ``available_reason`` (the block used, or why none / what is
    missing); ``can_serve`` (None when not asked: the recipe was already unavailable)
    with ``serve_reason``; ``rank`` (None when malformed); ``taken`` and ``why`` (one
    sentence: why it was taken or not).
    """

    recipe: str
    available: bool
    available_reason: str
    can_serve: bool | None
    serve_reason: str
    rank: int | None
    taken: bool
    why: str

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {"recipe": self.recipe, "available": self.available, "available_reason": self.available_reason,
                "can_serve": self.can_serve, "serve_reason": self.serve_reason, "rank": self.rank,
                "taken": self.taken, "why": self.why}


class BackendSelectionError(LemonpackError):
    """A hard override that cannot be honoured (exit code 1); ``kind`` is one of
    :data:`ERROR_KINDS` (the family's ``error`` when raised for another reason)."""

    def __init__(self, message: str, kind: str | None = None):
        super().__init__(message)
        if kind is not None:
            self.kind = kind


@dataclass(frozen=True)
class Selection:
    """The decision: ``outcome`` ``recipe`` (``recipe`` is the chosen id), ``default``
    (use :attr:`default`) or ``error`` (``error`` is one of :data:`ERROR_KINDS`);
    ``message`` one sentence saying why; ``override`` the override name and
    ``override_source`` where it came from (None without one); ``candidates`` every
    candidate's report, in discovery order; ``no_recipe_reason`` (the ``default`` outcome
    without an override) why no candidate was chosen, one short clause per candidate
    (``hello-engine declares no extensions["dev.lemonpack.serves"] patterns``; ``none
    discovered``), else None."""

    outcome: str
    model: str
    message: str
    recipe: str | None = None
    error: str | None = None
    override: str | None = None
    override_source: str | None = None
    default: DefaultBackend = BUILTIN_DEFAULT
    candidates: tuple[CandidateReport, ...] = field(default=())
    no_recipe_reason: str | None = None

    @property
    def ok(self) -> bool:
        """True unless the outcome is a hard error."""
        return self.outcome != "error"

    def require(self) -> Selection:
        """Return self; raise :class:`BackendSelectionError` (the message) for a hard error."""
        if self.outcome == "error":
            raise BackendSelectionError(self.message, self.error)
        return self

    def serving_recipe(self, registered: str | None, discovered: Sequence[str]) -> str | None:
        """The recipe id that serves the model, the rule of ``lemonpack serve``
        (:class:`lemonpack.server.catalog.Catalog`) that ``lemonpack select`` reports too:
        a registered model (``registered``: its recipe id) keeps it unless an override
        selected a recipe; a model file gets the selected recipe, or on the default outcome
        the first of the ``discovered`` recipe ids (discovery order) the default names.
        None when nothing serves a model file (a hard error, a default not discovered).
        Pure; raises nothing."""
        if registered is not None:
            return self.recipe if self.override and self.outcome == "recipe" and self.recipe else registered
        if self.outcome == "recipe":
            return self.recipe
        if self.outcome == "default":
            return next((rid for rid in discovered if self.default.matches(rid)), None)
        return None

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable form (``lemonpack select --json``)."""
        return {"model": self.model, "outcome": self.outcome, "recipe": self.recipe, "error": self.error,
                "message": self.message, "override": self.override, "override_source": self.override_source,
                "default": self.default.name, "candidates": [c.to_json() for c in self.candidates],
                "no_recipe_reason": self.no_recipe_reason}


# --- the declarations ------------------------------------------------------------------


def declared_serves(recipe: Recipe) -> tuple[tuple[str, ...] | None, str | None]:
    """``(patterns, problem)``: the ``dev.lemonpack.serves`` patterns (None when absent) or
    a problem sentence naming the JSON path when the value is malformed."""
    if SERVES_KEY not in recipe.extensions:
        return None, None
    value = recipe.extensions[SERVES_KEY]
    where = f'{recipe.file}: extensions["{SERVES_KEY}"]'
    if not isinstance(value, (tuple, list)) or not value:
        return None, f"{where} must be a non-empty list of glob patterns such as \"*.gguf\""
    for p in value:
        if not isinstance(p, str) or not p.strip() or "/" in p:
            return None, f"{where} has {p!r}: each pattern must be a non-empty file-name glob without '/'"
    return tuple(value), None


def preference_rank(recipe: Recipe) -> tuple[int | None, str | None]:
    """``(rank, problem)``: ``dev.lemonpack.rank`` (default 0), or None and a problem
    sentence naming the JSON path when it is not an integer."""
    value = recipe.extensions.get(RANK_KEY, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        return None, f'{recipe.file}: extensions["{RANK_KEY}"] must be an integer, got {value!r}'
    return value, None


def host_block(recipe: Recipe, host: HostFacts) -> EffectiveBlock | str:
    """The block this recipe runs with on ``host``, or a sentence saying why there is none.

    Section 9's choice (:func:`~lemonpack.contract.select.select_accelerator`) when the host
    has that accelerator; otherwise the first accelerator of the detection order (metal
    first on macOS) that both the recipe and the host have; none when no block of the host
    OS is for an accelerator the host has."""
    blocks = recipe.platforms.get(host.os)
    if not blocks:
        return (f"no platform block for {host.os} (the recipe declares: "
                f"{', '.join(recipe.platforms) or 'none'})")
    try:
        accel = select_accelerator(recipe, host)
    except SelectionError as e:  # pragma: no cover - the OS block exists
        return str(e)
    if accel not in host.accelerators:
        order = (("metal",) if host.os == "darwin" else ()) + DETECTION_ORDER + tuple(sorted(blocks))
        accel = next((a for a in order if a in blocks and a in host.accelerators), "")
    if not accel:
        return (f"no {host.os} block for an accelerator this host has (blocks: {', '.join(blocks)}; "
                f"host: {', '.join(sorted(host.accelerators))})")
    return block_for_arch(recipe, blocks[accel], host.gpu_arch(accel))


def _available(recipe: Recipe, host: HostFacts, presence: Mapping[str, Presence]) -> tuple[bool, str]:
    eff = host_block(recipe, host)
    if isinstance(eff, str):
        return False, eff
    fact = presence.get(recipe.recipe)
    if fact is None:
        return False, f"{eff.path}: presence of its artifact unknown (not checked)"
    if not fact.present:
        return False, f"{eff.path}: {fact.what} is not present"
    return True, f"{eff.path}: {fact.what} is present"


def serves_match(patterns: Sequence[str], names: Iterable[str]) -> tuple[str, str] | None:
    """``(name, pattern)``: the first of ``names`` (model file names) matching one of the
    ``dev.lemonpack.serves`` glob ``patterns`` (case-insensitively, :func:`fnmatch.fnmatchcase`
    of both lower-cased), or None: ``can_serve``'s rule, also the catalogue's for model entries."""
    for name in names:
        for p in patterns:
            if fnmatch.fnmatchcase(name.lower(), p.lower()):
                return name, p
    return None


def _can_serve(recipe: Recipe, model: ModelArtifact) -> tuple[bool, str]:
    patterns, problem = declared_serves(recipe)
    if problem:
        return False, problem
    if patterns is None:
        return False, f'declares no extensions["{SERVES_KEY}"] patterns'
    hit = serves_match(patterns, model.names)
    if hit is not None:
        return True, f"{hit[0]} matches {hit[1]}"
    shown = ", ".join(model.names) or "no file name"
    return False, f"{shown} matches none of {', '.join(patterns)}"


# --- the decision ------------------------------------------------------------------------


def _no_recipe_reason(facts: Sequence[tuple]) -> str:
    """Why none of ``facts`` (select_backend's per-candidate tuples) qualified: a clause each,
    the first three and a count of the rest; ``none discovered`` without candidates."""
    parts = []
    for r, avail, a_why, serve, s_why, _rank in facts:
        if not avail:
            parts.append(f"{r.recipe} is not available ({a_why})")
        elif not serve:
            parts.append(f"{r.recipe} {s_why}" if s_why.startswith("declares ") else f"{r.recipe} cannot serve it ({s_why})")
        else:
            parts.append(f"{r.recipe} has no preference rank")
    if not parts:
        return "none discovered"
    return "; ".join(parts[:3] + ([f"{len(parts) - 3} more"] if len(parts) > 3 else []))



def select_backend(model: ModelArtifact, candidates: Sequence[Recipe], host: HostFacts,
                   presence: Mapping[str, Presence], *, override: str | None = None,
                   override_source: str | None = None, default: DefaultBackend = BUILTIN_DEFAULT) -> Selection:
    """Decide which recipe serves ``model`` (module docstring; seed 001 section 2.3).

    ``candidates`` are the discovered recipes in discovery order (:func:`discovery_order`);
    ``host`` the host facts; ``presence`` recipe id -> :class:`Presence` (a recipe missing
    from it is unavailable, "not checked"); ``override`` the hard override name (None or
    blank: none) and ``override_source`` where it came from (for messages); ``default``
    the implicit fallback. Pure: no I/O. Never raises for any input; a hard error is a
    :class:`Selection` with outcome ``error`` (see :meth:`Selection.require`).
    """
    facts = []
    for r in candidates:
        avail, a_why = _available(r, host, presence)
        serve, s_why = _can_serve(r, model) if avail else (None, "not checked: unavailable")
        rank, r_problem = preference_rank(r)
        if r_problem and serve:
            serve, s_why = False, r_problem
        facts.append((r, avail, a_why, serve, s_why, rank))

    def reports(taken: str | None, why_for: Callable[..., str]) -> tuple[CandidateReport, ...]:
        return tuple(CandidateReport(r.recipe, a, aw, s, sw, k, r.recipe == taken, why_for(r, a, s, k))
                     for r, a, aw, s, sw, k in facts)

    def unqualified(avail: bool, serve: bool | None) -> str | None:
        if not avail:
            return "not available"
        if not serve:
            return "cannot serve the model"
        return None

    name = override.strip() if override else ""
    src = override_source or OVERRIDE_ENV
    if name:
        if default.matches(name):
            return Selection("default", model.ref, f"{src}={name} selects {default.description or default.name}",
                             override=name, override_source=src, default=default,
                             candidates=reports(None, lambda r, a, s, k: f"not considered: {src}={name} selects "
                                                                          f"the default"))
        hit = next((f for f in facts if f[0].recipe.lower() == name.lower()), None)
        if hit is None:
            known = ", ".join([r.recipe for r in candidates] + [default.name])
            return Selection("error", model.ref, f"{src}={name}: unknown backend (known: {known})",
                             error="unknown", override=name, override_source=src, default=default,
                             candidates=reports(None, lambda r, a, s, k: f"not named by {src}"))
        r, avail, a_why, serve, s_why, rank = hit
        if not avail:
            kind, msg = "unavailable", f"{src}={name}: recipe {r.recipe} is unavailable on this host: {a_why}"
        elif not serve:
            kind, msg = "cannot-serve", f"{src}={name}: recipe {r.recipe} cannot serve {model.ref}: {s_why}"
        else:
            return Selection("recipe", model.ref, f"{src}={name} selects recipe {r.recipe}", recipe=r.recipe,
                             override=name, override_source=src, default=default,
                             candidates=reports(r.recipe, lambda c, a, s, k: f"selected by {src}"
                                                if c is r else f"not named by {src}"))
        return Selection("error", model.ref, msg, error=kind, override=name, override_source=src, default=default,
                         candidates=reports(None, lambda c, a, s, k: f"named by {src} but {kind}"
                                            if c is r else f"not named by {src}"))

    best, best_rank = None, -1
    for f in facts:
        r, avail, _, serve, _, rank = f
        if avail and serve and rank is not None and (best is None or rank > best_rank):
            best, best_rank = f, rank
    if best is None:
        return Selection("default", model.ref, f"no available recipe can serve {model.ref}: "
                         f"{default.description or default.name}", default=default,
                         candidates=reports(None, lambda r, a, s, k: unqualified(a, s) or "not qualified"),
                         no_recipe_reason=_no_recipe_reason(facts))
    winner = best[0]

    def why(r: Recipe, a: bool, s: bool | None, k: int | None) -> str:
        if r is winner:
            return f"highest rank ({k}) among qualifying recipes"
        reason = unqualified(a, s)
        if reason:
            return reason
        if k == best[5]:
            return f"same rank ({k}) as {winner.recipe}, discovered later"
        return f"lower rank ({k} < {best[5]})"

    return Selection("recipe", model.ref, f"{winner.recipe} has the highest rank ({best[5]}) among the available "
                     f"recipes that can serve {model.ref}", recipe=winner.recipe, default=default, candidates=reports(winner.recipe, why))


# --- gathering facts (I/O, kept out of the decision) -------------------------------------


def discovery_order(discovered: Iterable[Any]) -> list[Any]:
    """Discovered recipes (:class:`~lemonpack.runtime.recipes.discovery.DiscoveredRecipe`) in
    discovery order: search-path priority (highest first), then file name within a
    directory, the order the scanner reads them."""
    return sorted(discovered, key=lambda d: (d.priority, d.file.name))


def model_artifact(ref: str, main: str) -> ModelArtifact:
    """The :class:`ModelArtifact` of a model named ``ref`` whose ``main`` checkpoint is
    ``main`` (a local path or a hub reference ``org/repo:file``). Reads the directory
    listing when ``main`` is a local directory (a bundle such as ``x.mlpackage``)."""
    names: list[str] = []
    local = os.path.expanduser(main)
    if ":" in main and not os.path.exists(local):
        names.append(main.rsplit(":", 1)[1].rsplit("/", 1)[-1])
    else:
        names.append(os.path.basename(os.path.normpath(local)))
        if os.path.isdir(local):
            try:
                names.extend(sorted(os.listdir(local)))
            except OSError:
                pass
    return ModelArtifact(ref, tuple(n for n in names if n))


__all__ = [
    "BUILTIN_DEFAULT", "BackendSelectionError", "CandidateReport", "DefaultBackend", "ERROR_KINDS", "ModelArtifact",
    "OUTCOMES", "OVERRIDE_ENV", "Presence", "RANK_KEY", "SERVES_KEY", "Selection", "declared_serves",
    "discovery_order", "host_block", "model_artifact", "preference_rank",
    "select_backend", "serves_match",
]
