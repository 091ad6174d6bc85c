"""``POST /v1/load``: the request body, and which load options a recipe actually uses.

Body rule (Lemonade's ``/api/v1/load``): ``model_name`` (or ``model``, or ``?model=``) names
the model; options come from top-level option names (:data:`LOAD_OPTIONS`: ``ctx_size`` ...)
and from an ``options`` or ``recipe_options`` object. A known field of the wrong type is the
client's mistake (HTTP 400 naming the field); any other top-level field (Lemonade clients send
``llamacpp_backend``, ``checkpoint``, ``recipe`` ...) is accepted and ignored, and the answer
and a logged warning name it.

Seed 000 section 4.2: a recipe receives options only through tokens (``{ctx_size}``,
``{custom:NAME}``, ``{custom_args}`` ...): its argv is passed as written, nothing is injected.
So a load option the selected platform block has no token for (a literal ``-c 256``) is not
applied: :func:`options_used` finds which are, the server restarts an engine only for those
and reports the others as ignored, with the reason (never "applied" when they are not).
"""

from __future__ import annotations

from typing import Any

from lemonpack.contract.model import Recipe
from lemonpack.contract.select import select_block
from lemonpack.contract.tokens import TokenSyntaxError, tokens_in
from lemonpack.errors import LemonpackError
from lemonpack.runtime.launch.tokens import OPTION_DEFAULTS
from lemonpack.server.body import BadBody, clip

#: Load options a ``POST /v1/load`` may set at its top level (section 4.2 option tokens).
LOAD_OPTIONS = frozenset({*OPTION_DEFAULTS, "custom_args"})
#: Options that choose rather than fill a token: the platform block (``device``).
_CHOOSING = frozenset({"device"})


def load_request(doc: object, query_model: str | None) -> tuple[str, dict[str, Any] | None, list[str]]:
    """``(model, options or None, ignored field names)`` of a ``POST /v1/load`` body
    (module docstring). Raises :class:`BadBody` naming the field."""
    if not isinstance(doc, dict):
        raise BadBody("load body must be a JSON object")
    for k in ("model_name", "model"):
        if k in doc and not isinstance(doc[k], str):
            raise BadBody(f"load field {k!r} must be a string (the model's name), not {type(doc[k]).__name__}")
    model = next((doc[k] for k in ("model_name", "model") if isinstance(doc.get(k), str)), query_model)
    if not model:
        raise BadBody("no model given (model_name)")
    options: dict[str, Any] | None = None
    ignored: list[str] = []
    for k, v in doc.items():
        if k in ("model_name", "model"):
            continue
        if k in ("options", "recipe_options"):
            if not isinstance(v, dict):
                raise BadBody(f"load field {k!r} must be an object of option names to values")
            items = list(v.items())
        elif k in LOAD_OPTIONS:
            items = [(k, v)]
        else:
            ignored.append(clip(k, 60))
            continue
        for name, value in items:
            if not isinstance(value, (str, int, float, bool)) or not isinstance(name, str):
                raise BadBody(f"load option {clip(name, 60)!r} must be a string, number or boolean")
            options = options or {}
            options[name] = value
    return model, options, ignored


def options_used(recipe: Recipe, host_facts: Any, device: str | None = None) -> frozenset[str] | None:
    """The option names the platform block ``recipe`` runs with on this host consumes through
    its tokens (args, env, working directory, stop command); None when it cannot be known
    here (a ``variant_of`` recipe: its built-in launch plan reads options itself) or the
    block cannot be selected (the launch then says why)."""
    try:
        eff = select_block(recipe, host_facts, device)
    except LemonpackError:
        return None
    if eff.binary:
        return None
    used: set[str] = set(_CHOOSING)
    templates = [*eff.args, *eff.env.values(), *eff.stop_command_args, eff.command or "", eff.working_dir or ""]
    for t in templates:
        try:
            toks = tokens_in(t)
        except TokenSyntaxError:
            continue
        for tok in toks:
            if tok.kind in OPTION_DEFAULTS or tok.kind in ("custom_args", "log_level"):
                used.add(tok.kind)
            elif tok.kind == "custom" and tok.name:
                used.add(tok.name)
    return frozenset(used)


def split_options(options: dict[str, Any], used: frozenset[str] | None, recipe_id: str
                  ) -> tuple[dict[str, Any], dict[str, str]]:
    """``(applied, ignored name -> why)`` of ``options`` for a recipe that consumes ``used``
    (None: all of them)."""
    if used is None:
        return dict(options), {}
    applied = {k: v for k, v in options.items() if k in used}
    ignored = {k: f"recipe {recipe_id!r} has no {{{k}}} token in its command line (its arguments are passed "
                  "as written; edit the recipe to take it)" if k in OPTION_DEFAULTS or k == "custom_args" else
               f"recipe {recipe_id!r} has no {{custom:{k}}} token in its command line"
               for k in options if k not in used}
    return applied, ignored


__all__ = ["LOAD_OPTIONS", "load_request", "options_used", "split_options"]
