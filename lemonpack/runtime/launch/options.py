"""The one merge of launch options: what a launch's option tokens read (RFC sections 4.2, 4.5, 6, 10).

Every place that needs the options an engine runs with asks :func:`launch_options`: the launch
plan (:func:`lemonpack.runtime.launch.build.build_launch_plan`, whose ``{ctx_size}``,
``{custom:NAME}``, ``{custom_args}`` ... resolve from it), ``lemonpack run``'s device warning,
``lemonpack serve``'s memory admission (:mod:`lemonpack.server.driver`) and the estimate
``lemonpack select`` shows (:meth:`lemonpack.runtime.models.ref.ResolvedModel.memory`). So the
engine cannot be started at one context size and admitted at another. The memory estimate's
inputs are :func:`memory_options`: the values those option tokens take, by the launch's own
rule (:func:`lemonpack.runtime.launch.tokens.option_value`).

Precedence, lowest first (a later layer's key replaces an earlier one's, shallowly):

1. the recipe's ``custom_options`` ``default_value``s (section 4.5: the knobs a recipe exposes,
   each with its default);
2. the recipe's ``recipe_options`` (section 6: both lists already carry what ``extends``
   inherited, merged by :func:`lemonpack.contract.extends.merge_recipe_options` and
   :func:`~lemonpack.contract.extends.merge_custom_options` at discovery, the child's keys
   winning);
3. the registered model's ``recipe_options`` (``user_models.json``, section 10: "recipe plus
   recipe_options");
4. the load's options: ``POST /v1/load``'s options, ``lemonpack run --option``.

Each step is the contract's shallow merge (:func:`~lemonpack.contract.extends.merge_recipe_options`,
``{**lower, **higher}``), the rule ``extends`` applies between recipes. A key whose value is
None (JSON ``null`` in the model registry) is kept: a token then takes its documented default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import reduce
from types import MappingProxyType
from typing import Any

from lemonpack.contract.extends import merge_recipe_options
from lemonpack.contract.model import Recipe
from lemonpack.runtime.launch.tokens import option_value


def custom_option_defaults(recipe: Recipe) -> Mapping[str, Any]:
    """``{name: default_value}`` of ``recipe.custom_options`` (section 4.5), in the recipe's
    order; an entry without a ``name`` or a ``default_value`` gives nothing (the schema
    requires both, so only a hand-built :class:`Recipe` lacks them). Raises nothing."""
    return MappingProxyType({o["name"]: o["default_value"] for o in recipe.custom_options
                             if "name" in o and "default_value" in o})


def launch_options(recipe: Recipe | None, model_options: Mapping[str, Any] | None = None,
                   load_options: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """The options one launch of ``recipe`` runs with: a read-only mapping option name ->
    JSON scalar, merged by the precedence of the module docstring (``custom_options``
    defaults, ``recipe.recipe_options``, ``model_options``, ``load_options``; a later layer
    wins). ``recipe`` None (a model whose recipe is not discovered) contributes nothing;
    ``model_options`` is a registered model's ``recipe_options`` (``ModelSpec.recipe_options``),
    ``load_options`` the load's (None: none). Raises nothing: a value is checked where a
    token reads it (:func:`memory_options`, the launch plan's tokens)."""
    layers: list[Mapping[str, Any]] = []
    if recipe is not None:
        layers += [custom_option_defaults(recipe), recipe.recipe_options]
    layers += [model_options or {}, load_options or {}]
    return reduce(merge_recipe_options, layers, MappingProxyType({}))


@dataclass(frozen=True)
class MemoryOptions:
    """What the memory estimate of a launch reads from its options: ``ctx_size`` (tokens of
    context, the ``{ctx_size}`` token's value) and the KV cache types ``cache_type_k`` /
    ``cache_type_v`` (GGML type names, ``f16`` by default)."""

    ctx_size: int
    cache_type_k: str
    cache_type_v: str


def memory_options(options: Mapping[str, Any]) -> MemoryOptions:
    """The ``{ctx_size}``, ``{cache_type_k}`` and ``{cache_type_v}`` values a launch with the
    merged ``options`` (:func:`launch_options`) resolves (section 4.2: the option of that
    name, else the default: 4096, f16, f16), so an estimate uses the engine's own figures.
    Raises :class:`~lemonpack.errors.TokenError` for a value the launch would refuse (a
    ``ctx_size`` that is not an integer, a boolean, a list)."""
    return MemoryOptions(ctx_size=int(option_value(options, "ctx_size")),
                         cache_type_k=option_value(options, "cache_type_k"),
                         cache_type_v=option_value(options, "cache_type_v"))


__all__ = ["MemoryOptions", "custom_option_defaults", "launch_options", "memory_options"]
