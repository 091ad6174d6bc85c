"""``lemonpack probe MODEL_FILE``: which extension provider serves a model file, and why.

The providers are the registry's, in its order (:func:`lemonpack.extensions.pipeline.run_pipeline`
over the extension tree, ``--extension-dir`` / ``GUFO_EXTENSION_DIRS``, the lock and the
feature set); the file's identity is read from its GGUF header
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

CAPABILITIES = ("text_generation", "embeddings", "speech_recognition", "speech_synthesis",
                "image_generation", "video_generation", "decisions")


def _providers(tree: Path, extension_dirs: list[Path], lock: Path | None, features: list[str]):
    """The pipeline's :class:`Selection`: with ``--lock`` the release's extensions (the lock's
    selection); without, every extension the platform supports (a self-built Gufo)."""
    from lemonpack.extensions.pipeline import run_pipeline

    return run_pipeline(tree, extra_dirs=tuple(extension_dirs), select="lock" if lock else "all", lock=lock,
                        features=frozenset(features) if features else None)


@app.command("probe")
def probe(
    model: Path = typer.Argument(..., metavar="MODEL_FILE", help="GGUF model file."),
    extension_dir: list[Path] = typer.Option([], "--extension-dir", metavar="DIR",
                                             help="Extra extension directory (repeatable; also GUFO_EXTENSION_DIRS)."),
    lock: Path | None = typer.Option(None, "--lock", metavar="PATH",
                                     help="Release lock: ask only the providers of the extensions it selects "
                                          "(default: every extension the platform supports)."),
    feature: list[str] = typer.Option([], "--feature", metavar="FEATURE",
                                      help="Build feature (repeatable: linux, hip, cuda, vulkan, testing); "
                                           "default: the host's."),
    capability: str = typer.Option("text_generation", "--capability", metavar="CAPABILITY",
                                   help=f"Capability of the providers asked ({', '.join(CAPABILITIES)})."),
    tree: Path = typer.Option(Path("."), "--tree", metavar="DIR",
                              help="Extension tree to discover (holds extensions.lock); default: current directory."),
    json_out: bool = JSON_OPTION,
) -> int:
    """Show which provider would serve MODEL_FILE, asking each probe in registry order (first yes wins)."""
    from lemonpack.errors import LemonpackError
    from lemonpack.extensions.probe import decide, read_identity

    if capability not in CAPABILITIES:
        raise LemonpackError(f"--capability {capability!r} is not one of {', '.join(CAPABILITIES)}")
    identity = read_identity(model)
    selection = _providers(tree, extension_dir, lock, feature)
    decision = decide(identity, selection.providers, capability)
    if json_out:
        print_json({**decision.to_json(), "model": str(model), "format": identity.format,
                    "features": sorted(selection.features), "api_version": selection.api_version})
        return 0 if decision.ok else 1
    arch = identity.architecture if identity.architecture is not None else "(none)"
    console.print(f"model: {model} (GGUF v{identity.version}, general.architecture = {arch}, "
                  f"{len(identity.tensors)} tensors)", markup=False)
    console.print(f"features: {' '.join(sorted(selection.features)) or '(none)'}", markup=False)
    if decision.ok:
        c = decision.chosen
        console.print(f"decision: {c.provider} ({c.extension})", markup=False)
    else:
        console.print("decision: none", markup=False)
    if not decision.candidates:
        console.print(f"providers of {capability}: none in the registry", markup=False)
    else:
        console.print(f"providers of {capability}, in registry order (first yes wins):", markup=False)
    shadowed_by = None
    for i, c in enumerate(decision.candidates, 1):
        if not c.available:
            verdict = "not asked (unavailable)"
        elif c.chosen:
            verdict, shadowed_by = "yes: chosen", c.provider
        elif c.answer:
            verdict = f"yes, but {shadowed_by} said yes first"
        else:
            verdict = "no"
        console.print(f"  {i}. {c.provider} ({c.extension}): {verdict}", markup=False)
        for reason in c.reasons:
            console.print(f"       - {reason}", markup=False)
    if not decision.ok:
        err_console.print(f"error: {decision.message}", markup=False)
        return 1
    return 0
