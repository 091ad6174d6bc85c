"""``lemonpack select MODEL [--json]``: which recipe the backend selector picks for a model.

MODEL is a model file (or bundle directory) or a registered model name (``user.*``). The
decision is :func:`lemonpack.runtime.selector.select_backend` over the discovered recipes
(discovery order), the host facts (``LEMONPACK_HOST_FACTS`` or detection) and the presence
of each recipe's binary or image; the override is ``LEMONPACK_BACKEND``, else the
registered model's ``backend`` field. Prints the decision and, per candidate, why it was
taken or not. Exit codes: 0 decided (a recipe or the default), 1 a hard error (an
override naming an unknown, unavailable or unable recipe) or bad input.
"""

from __future__ import annotations

from pathlib import Path

import typer

from lemonpack.cli._app import JSON_OPTION, app, console, err_console, print_json
from lemonpack.errors import LemonpackError


def _artifact(ref: str):
    """``(ModelArtifact, backend override of the registered model or None, its source)``."""
    from lemonpack.runtime.models import ModelRegistry, looks_like_path
    from lemonpack.runtime.selector import model_artifact

    path = Path(ref)
    if path.exists():
        return model_artifact(ref, str(path.resolve())), None, None
    registry = ModelRegistry()
    entries = registry.load()
    if ref in entries:
        entry = entries[ref]
        return model_artifact(ref, entry.main), entry.backend, f'{registry.path} ["{ref}"].backend'
    if looks_like_path(ref):
        raise LemonpackError(f"model file not found: {ref}")
    raise LemonpackError(f"no model file or registered model named {ref!r} in {registry.path}")


def _memory(ref: str) -> dict | None:
    """The serve admission estimate of ``ref``'s main file (``lemonpack.runtime.memory``), at
    the registered model's ``ctx_size`` (else the default); None when it is not a local file."""
    import os

    from lemonpack.runtime.launch import OPTION_DEFAULTS
    from lemonpack.runtime.memory import estimate_model
    from lemonpack.runtime.models import ModelRegistry

    opts: dict = {}
    path = Path(ref)
    if not path.exists():
        try:
            entry = ModelRegistry().load().get(ref)
        except LemonpackError:
            return None
        if entry is None:
            return None
        path = Path(os.path.expanduser(entry.main))
        opts = dict(getattr(entry, "recipe_options", None) or {})
    if not path.exists():
        return None
    try:
        ctx = int(opts.get("ctx_size") or OPTION_DEFAULTS["ctx_size"])
        est = estimate_model(str(path), ctx, str(opts.get("cache_type_k") or "f16"), str(opts.get("cache_type_v") or "f16"))
    except (LemonpackError, ValueError):
        return None
    return {"bytes": est.total, "weights": est.weights, "kv": est.kv, "ctx_size": ctx, "how": est.how}


@app.command("select")
def select(
    model: str = typer.Argument(..., metavar="MODEL", help="Model file or directory, or a registered model name."),
    json_out: bool = JSON_OPTION,
) -> int:
    """Show which recipe would serve MODEL, and why each candidate was taken or not."""
    from lemonpack.contract import detect_host
    from lemonpack.runtime.discovery import Discovery
    from lemonpack.runtime.selector import discovery_order, effective_override, gather_presence, select_backend

    artifact, model_backend, model_source = _artifact(model)
    override, source = effective_override(model_backend, model_source)
    host = detect_host()
    recipes = [d.recipe for d in discovery_order(Discovery().scan().recipes.values())]
    presence = gather_presence(recipes, host)
    sel = select_backend(artifact, recipes, host, presence, override=override, override_source=source)
    if json_out:
        doc = sel.to_json()
        mem = _memory(model)
        if mem is not None:
            doc["memory"] = mem
        print_json(doc)
        return 0 if sel.ok else 1
    mem = _memory(model)
    if sel.outcome == "recipe":
        head = f"recipe {sel.recipe}"
    elif sel.outcome == "default":
        head = f"default ({sel.default.name})"
    else:
        head = f"hard error ({sel.error})"
    console.print(f"model: {artifact.ref} ({', '.join(artifact.names)})", markup=False)
    console.print(f"decision: {head}: {sel.message}", markup=False)
    if mem is not None:
        console.print(f"memory: {mem['bytes']} bytes at ctx_size {mem['ctx_size']} ({mem['how']}; "
                      "what lemonpack serve admits against --memory-budget)", markup=False)
    if not sel.candidates:
        console.print("candidates: none discovered", markup=False)
    for c in sel.candidates:
        mark = "taken" if c.taken else "not taken"
        serve = "-" if c.can_serve is None else ("yes" if c.can_serve else "no")
        console.print(f"  {c.recipe}: {mark}: {c.why}", markup=False)
        console.print(f"      available: {'yes' if c.available else 'no'} ({c.available_reason}); "
                      f"can serve: {serve} ({c.serve_reason}); rank: {c.rank}", markup=False)
    if not sel.ok:
        err_console.print(f"error: {sel.message}", markup=False)
        return 1
    return 0
