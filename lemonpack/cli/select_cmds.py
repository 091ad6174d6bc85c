"""``lemonpack select MODEL [--json]``: which recipe the backend selector picks for a model.

MODEL is a model file (or bundle directory) or a registered model name (``user.*``). The
decision is :func:`lemonpack.runtime.selection.selector.select_backend` over the discovered recipes
(discovery order), the host facts (``LEMONPACK_HOST_FACTS`` or detection) and the presence
of each recipe's binary or image; the override is ``LEMONPACK_BACKEND``, else the
registered model's ``backend`` field. Prints the decision, the recipe ``lemonpack serve``
would start for it (``serves``: a registered model keeps its registered recipe
unless an override selected another, ``Selection.serving_recipe``;
``--json``: ``serving``, None when nothing serves it), per candidate why it was
taken or not, and the memory estimate ``lemonpack serve`` admits the model with (at the launch
options of the recipe that would serve it: :func:`lemonpack.runtime.launch.options.launch_options`).
Exit codes: 0 decided (a recipe or the default), 1 a hard error (an override naming an unknown,
unavailable or unable recipe) or bad input.
"""

from __future__ import annotations

import typer

from lemonpack.cli._app import JSON_OPTION, app, console, err_console, print_json


@app.command("select")
def select(
    model: str = typer.Argument(..., metavar="MODEL", help="Model file or directory, or a registered model name."),
    json_out: bool = JSON_OPTION,
) -> int:
    """Show which recipe would serve MODEL, and why each candidate was taken or not."""
    from lemonpack.contract import detect_host
    from lemonpack.runtime.recipes.discovery import Discovery
    from lemonpack.runtime.models.ref import resolve_model
    from lemonpack.runtime.selection.presence import gather_presence
    from lemonpack.runtime.selection.selector import discovery_order, effective_override, select_backend

    resolved = resolve_model(model, directories=True)  # a file, a bundle directory or a registered name
    artifact = resolved.artifact()
    override, source = effective_override(resolved.backend, resolved.backend_source)
    host = detect_host()
    recipes = [d.recipe for d in discovery_order(Discovery().scan().recipes.values())]
    presence = gather_presence(recipes, host)
    sel = select_backend(artifact, recipes, host, presence, override=override, override_source=source)
    serving = sel.serving_recipe(resolved.recipe, [r.recipe for r in recipes])  # serve's rule
    mem = resolved.memory(next((r for r in recipes if r.recipe == serving), None))  # at its launch options
    if json_out:
        doc = sel.to_json()
        doc["serving"] = serving
        if mem is not None:
            doc["memory"] = mem
        print_json(doc)
        return 0 if sel.ok else 1
    if sel.outcome == "recipe":
        head = f"recipe {sel.recipe}"
    elif sel.outcome == "default":
        head = f"default ({sel.default.name})"
    else:
        head = f"hard error ({sel.error})"
    console.print(f"model: {artifact.ref} ({', '.join(artifact.names)})", markup=False)
    if sel.outcome == "default" and sel.no_recipe_reason is not None:  # say why before what it falls back to
        console.print(f"decision: {head}: no recipe chosen ({sel.no_recipe_reason}), so "
                      f"{sel.default.description or sel.default.name}", markup=False)
    else:
        console.print(f"decision: {head}: {sel.message}", markup=False)
    if resolved.recipe is not None and serving is not None:
        why = "an override" if serving != resolved.recipe else "its registered recipe"
        console.print(f"serves: {serving} ({why}: what lemonpack serve starts for {artifact.ref})", markup=False)
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
