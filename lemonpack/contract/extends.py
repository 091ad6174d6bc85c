"""Resolve ``extends`` among recipes (RFC section 6); used by discovery (runtime) and build.

``extends`` inherits declarative data only: the base's ``recipe_options`` and
``custom_options`` are merged into the child, the child's entries winning where they
overlap. Capabilities, platform blocks and every other field are never inherited (the
child supplies its own execution). Chains (``a`` extends ``b`` extends ``c``) resolve
from the root down. A cycle drops every member, each with a reason naming the cycle; a
base that cannot be resolved (absent, a built-in, or itself dropped) drops the child
with a recorded reason. ``extends`` and ``variant_of`` are mutually exclusive; the
contract loader already rejects a recipe declaring both, and a recipe extending itself.

Merge rules:

- ``recipe_options`` (an object): shallow merge, ``{**base, **child}``.
- ``custom_options`` (a list of objects keyed by ``name``): the base's entries in the
  base's order, an entry replaced in place by the child's entry of the same name, then
  the child's new entries in the child's order.

The resolved recipes are new frozen :class:`~lemonpack.contract.model.Recipe` objects
(``dataclasses.replace``) whose ``recipe_options`` / ``custom_options`` carry the
inherited entries, so launch code resolves ``{custom:NAME}`` from them directly.
``document`` and ``canonical`` stay the file as authored (what gets packaged and
hashed); ``extends`` stays set so the relation remains visible.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from lemonpack.contract.builtins import BUILTIN_RECIPES
from lemonpack.contract.model import Recipe


@dataclass(frozen=True)
class ExtendsDrop:
    """A recipe dropped while resolving ``extends``.

    ``recipe`` is its id, ``file`` where it was loaded from, ``rule`` one of
    ``extends-cycle``, ``extends-missing-base``, ``extends-base-dropped``, and
    ``reason`` a sentence naming the base or the cycle (``a -> b -> a``).
    """

    recipe: str
    file: str
    rule: str
    reason: str


@dataclass(frozen=True)
class ExtendsResult:
    """The outcome of :func:`resolve_extends`.

    ``recipes`` maps recipe id to the resolved :class:`Recipe` (recipes without
    ``extends`` are passed through unchanged, the same object); ``chains`` maps every
    kept recipe that extends something to its base chain, nearest first
    (``("b", "c")`` for ``a`` extends ``b`` extends ``c``); ``dropped`` lists the
    recipes removed, in id order.
    """

    recipes: Mapping[str, Recipe]
    chains: Mapping[str, tuple[str, ...]]
    dropped: tuple[ExtendsDrop, ...]


def merge_recipe_options(base: Mapping[str, Any], child: Mapping[str, Any]) -> Mapping[str, Any]:
    """``{**base, **child}`` as a read-only mapping (the child's keys win)."""
    return MappingProxyType({**base, **child})


def merge_custom_options(base: tuple[Mapping[str, Any], ...],
                         child: tuple[Mapping[str, Any], ...]) -> tuple[Mapping[str, Any], ...]:
    """Merge two ``custom_options`` lists keyed by each entry's ``name``.

    The base's order is kept, an entry the child redefines is replaced in place by the
    child's (whole) entry, and the child's new entries follow in the child's order.
    """
    child_by_name = {c["name"]: c for c in child}
    base_names = {b["name"] for b in base}
    merged = [child_by_name.get(b["name"], b) for b in base]
    merged.extend(c for c in child if c["name"] not in base_names)
    return tuple(merged)


def resolve_extends(recipes: Mapping[str, Recipe]) -> ExtendsResult:
    """Resolve every ``extends`` relation among ``recipes`` (id -> winning recipe).

    Only the recipes given can serve as bases: a built-in id, a recipe that is absent,
    and one that was itself dropped all make the child unresolvable. Never raises for
    bad input; every drop is returned with its reason. Deterministic: the result does
    not depend on the mapping's order.
    """
    resolved: dict[str, Recipe] = {}
    chains: dict[str, tuple[str, ...]] = {}
    dropped: dict[str, ExtendsDrop] = {}

    def drop(rid: str, rule: str, reason: str) -> None:
        dropped.setdefault(rid, ExtendsDrop(rid, recipes[rid].file, rule, reason))

    for start in sorted(recipes):
        if start in resolved or start in dropped:
            continue
        # Walk up the chain until a resolved/dropped recipe, a root, a missing base or a cycle.
        path: list[str] = []
        on_path: dict[str, int] = {}
        rid: str | None = start
        fate: str = "root"  # root | resolved | dropped | missing | cycle
        while True:
            assert rid is not None
            if rid in resolved:
                fate = "resolved"
                break
            if rid in dropped:
                fate = "dropped"
                break
            if rid in on_path:
                fate = "cycle"
                break
            on_path[rid] = len(path)
            path.append(rid)
            base = recipes[rid].extends
            if base is None:
                fate = "root"
                break
            if base not in recipes:
                fate = "missing"
                break
            rid = base

        if fate == "cycle":
            assert rid is not None
            members = path[on_path[rid]:]
            cycle_text = " -> ".join(members + [rid])
            for m in members:
                drop(m, "extends-cycle", f"recipe {m!r} is part of an extends cycle: {cycle_text}")
            below = path[:on_path[rid]]
            _drop_chain(below, recipes, drop, reason_of=lambda b: dropped[b].reason)
            continue
        if fate == "missing":
            last = path[-1]
            base = recipes[last].extends
            assert base is not None
            if base in BUILTIN_RECIPES:
                why = (f"base {base!r} is a built-in recipe; extends only resolves among "
                       f"external recipe descriptors")
            else:
                why = f"base recipe {base!r} was not found among the discovered recipes"
            drop(last, "extends-missing-base", f"recipe {last!r} extends {base!r}: {why}")
            _drop_chain(path[:-1], recipes, drop, reason_of=lambda b: dropped[b].reason)
            continue
        if fate == "dropped":
            _drop_chain(path, recipes, drop, reason_of=lambda b: dropped[b].reason)
            continue
        # root or resolved: resolve from the top of the walked path down to ``start``.
        for rid_ in reversed(path):
            recipe = recipes[rid_]
            if recipe.extends is None:
                resolved[rid_] = recipe
                continue
            base_recipe = resolved[recipe.extends]
            resolved[rid_] = dataclasses.replace(
                recipe,
                recipe_options=merge_recipe_options(base_recipe.recipe_options, recipe.recipe_options),
                custom_options=merge_custom_options(base_recipe.custom_options, recipe.custom_options),
            )
            chains[rid_] = (recipe.extends,) + chains.get(recipe.extends, ())

    return ExtendsResult(
        recipes=MappingProxyType(dict(sorted(resolved.items()))),
        chains=MappingProxyType(dict(sorted(chains.items()))),
        dropped=tuple(dropped[k] for k in sorted(dropped)),
    )


def _drop_chain(path: list[str], recipes: Mapping[str, Recipe], drop, *, reason_of) -> None:
    """Drop ``path`` (children first ... nearest-to-base last) because the base of its
    last element was dropped; each child names its base and that base's reason."""
    for rid in reversed(path):
        base = recipes[rid].extends
        assert base is not None
        drop(rid, "extends-base-dropped",
             f"recipe {rid!r} extends {base!r}, which was dropped ({reason_of(base)})")


__all__ = ["ExtendsDrop", "ExtendsResult", "merge_custom_options", "merge_recipe_options", "resolve_extends"]
