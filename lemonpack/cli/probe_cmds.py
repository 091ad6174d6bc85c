"""``lemonpack probe MODEL_FILE``: which extension provider serves a model file, and why.

The providers are the registry's, in its order (:func:`lemonpack.extensions.pipeline.run_pipeline`
with the options of ``lemonpack extensions``: ``--tree``, ``--extension-dir`` /
``GUFO_EXTENSION_DIRS``, ``--lock``, ``--select`` (default: the release lock), ``--feature``);
the providers of discovered extensions outside the selection are listed too, as not in this
build, and not asked. The file's identity is read from its GGUF header
(:func:`lemonpack.extensions.probe.read_identity`) and every probe of the capability asked
is evaluated in order; the first yes wins (seed 002 section 4). Prints the decision and,
per provider, its answer and the reason for each condition; unavailable providers are
listed with their reason and not asked. Exit codes: 0 a provider was chosen, 1 none said
yes (the no-provider error) or bad input (unreadable model file, invalid lock).
"""

from __future__ import annotations

from pathlib import Path

import typer

from lemonpack.cli._app import JSON_OPTION, app, console, err_console, print_json
from lemonpack.cli.extensions_cmds import DIR_OPTION, FEATURE_OPTION, LOCK_OPTION, SELECT_OPTION, TREE_OPTION, _run
from lemonpack.errors import one_line
from lemonpack.extensions.vocabulary import CAPABILITIES


@app.command("probe")
def probe(
    model: Path = typer.Argument(..., metavar="MODEL_FILE", help="GGUF model file."),
    tree: Path = TREE_OPTION,
    extension_dir: list[Path] = DIR_OPTION,
    lock: Path = LOCK_OPTION,
    select: list[str] = SELECT_OPTION,
    feature: list[str] = FEATURE_OPTION,
    capability: str = typer.Option("text_generation", "--capability", metavar="CAPABILITY",
                                   help=f"Capability of the providers asked ({', '.join(CAPABILITIES)})."),
    json_out: bool = JSON_OPTION,
) -> int:
    """Show which extension provider would serve MODEL_FILE: each probe of the registry is
    asked in order, the first yes wins (seed 002 section 4). Exit 1 when none says yes."""
    from lemonpack.extensions.pipeline import registry_candidates
    from lemonpack.extensions.probe import decide, read_identity

    if capability not in CAPABILITIES:
        raise typer.BadParameter(f"{capability!r} is not one of {', '.join(CAPABILITIES)}", param_hint="--capability")
    identity = read_identity(model)
    selection = _run(tree, extension_dir, lock, select, feature)
    mode = select[0] if len(select) == 1 and select[0] in ("lock", "all") else ("list" if select else "lock")
    decision = decide(identity, registry_candidates(selection, mode), capability)
    if json_out:
        print_json({**decision.to_json(), "model": str(model), "format": identity.format,
                    "features": sorted(selection.features), "api_version": selection.api_version,
                    "rejected": [{"manifest": str(m), "reasons": list(r)} for m, r in selection.rejected]})
        return 0 if decision.ok else 1
    arch = repr(identity.architecture) if identity.architecture is not None else "(missing)"
    out = lambda text: console.print(one_line(text), markup=False)  # noqa: E731
    out(f"model: {model} (GGUF v{identity.version}, general.architecture = {arch}, {len(identity.tensors)} tensors)")
    out(f"features: {' '.join(sorted(selection.features)) or '-'}; extension API {selection.api_version}")
    c = decision.chosen
    out(f"decision: {c.provider} ({c.extension})" if c else "decision: none")
    if not decision.candidates:
        out(f"providers of {capability}: none")
    else:
        out(f"providers of {capability}, in registry order (the first yes wins):")
    first = None
    for i, c in enumerate(decision.candidates, 1):
        if not c.available:
            verdict = "not asked"
        elif c.chosen:
            verdict, first = "yes: chosen", c.provider
        elif c.answer:
            verdict = f"yes, but {first} said yes first"
        else:
            verdict = "no"
        out(f"  {i}. {c.provider} ({c.extension}): {verdict}")
        for reason in c.reasons:
            out(f"       - {reason}")
    if selection.rejected:
        out(f"rejected manifests: {len(selection.rejected)} (not asked; see lemonpack extensions check)")
    if not decision.ok:
        err_console.print(one_line(f"error: {decision.message}"), markup=False)
        return 1
    return 0
