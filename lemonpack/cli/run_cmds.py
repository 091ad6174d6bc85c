"""``lemonpack run RECIPE --model FILE``: launch one engine in the foreground (RFC section 9).

Loads the recipe, detects the host, builds the launch plan, spawns the engine, waits for
its health probe, prints the URL and the argv it ran, streams its log lines to stderr, and
on Ctrl-C (SIGINT) or SIGTERM stops it and everything it started. An engine that fails to
start or dies exits with code 7 and its last log lines; a stop by SIGINT exits 130, by
SIGTERM 143 (as shells report them), after everything was stopped. The engine is driven by
:class:`lemonpack.runtime.lifecycle.runner.Runner` (the supervisor), the same driver the server uses;
at start-up, leftovers of dead runtimes (labelled containers, tagged processes) are removed
whatever the recipe. Runtime warnings (clean-up failures) are logged to stderr. If this process is killed outright
(SIGKILL), the engine dies with it (parent-death signal) and a sentinel process removes
whatever else it started (see ``lemonpack/runtime/lifecycle/SUPERVISOR.md``).

The command parses and prints; the work is :func:`lemonpack.runtime.lifecycle.foreground.prepare_run`
and :func:`~lemonpack.runtime.lifecycle.foreground.run_foreground`. Before anything is spawned: RECIPE
is resolved by :meth:`lemonpack.runtime.recipes.discovery.Discovery.resolve` (a file, or a discovered
id); a recipe whose container images are not pinned by digest is
refused with the ``lint``/``build`` problems; ``--device`` must name an accelerator block
the recipe has for this OS and ``--port`` must be 1..65535 and free (usage errors, exit 2,
as for ``lemonpack serve``); ``--model`` that looks like a path
(a ``/`` or a model file suffix) and is not a file is "model file not found". The
``starting`` line names the health probe it waits for. A registry engine image is judged by
the trust policy (``--policy FILE``/``--registries.d DIR``, else the default places) before
any process starts; a rejection exits 3.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys

import typer

from lemonpack.cli._app import JSON_OPTION, POLICY_OPTION, REGISTRIES_D_OPTION, app, console, err_console
from lemonpack.runtime.lifecycle.stop_signals import StopSignals


@app.command("run")
def run(
    recipe: str | None = typer.Argument(None, metavar="RECIPE",
                                        help="Recipe file (JSON) or the id of a discovered recipe."),
    model: str | None = typer.Option(None, "--model", "-m", help="Model file (checkpoint 'main') or a registered "
                                     "model name; required unless --example."),
    device: str | None = typer.Option(None, "--device", help="Accelerator block to use (cpu, vulkan, rocm ...)."),
    option: list[str] = typer.Option([], "--option", "-o", help="Recipe option KEY=VALUE (repeatable)."),
    port: int | None = typer.Option(None, "--port", min=1, max=65535,
                                    help="Port for the engine, 1..65535; it must be free (default: a free one)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address the engine listens on."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not stream the engine's log lines."),
    example: bool = typer.Option(False, "--example", help="Run lemonpack's shipped example engine (hello-engine, "
                                 "installed by `lemonpack install --example`), by default with its stand-in model."),
    policy: str | None = POLICY_OPTION,
    registries_d: str | None = REGISTRIES_D_OPTION,
    json_out: bool = JSON_OPTION,
) -> int:
    """Launch RECIPE for a model in the foreground; Ctrl-C stops it and everything it started."""
    from lemonpack.runtime.lifecycle.foreground import prepare_run, run_foreground

    if example:  # the shipped example: `lemonpack install --example` put its engine in place
        from lemonpack.examples import EXAMPLE_MODEL, EXAMPLE_RECIPE

        if recipe is not None:
            raise typer.BadParameter("--example runs the shipped example recipe; give no RECIPE",
                                     param_hint="--example")
        recipe, model = str(EXAMPLE_RECIPE), model or str(EXAMPLE_MODEL)
    if recipe is None:
        raise typer.BadParameter("give a RECIPE (or --example)", param_hint="RECIPE")
    if model is None:
        raise typer.BadParameter("a model file or registered model name is required", param_hint="'--model' / '-m'")
    fg = prepare_run(recipe, model, device=device, options=option, port=port, host=host,
                     install_ref="--example" if example else recipe, policy=policy, registries_d=registries_d)
    for line in [*(f"warning: {n}" for n in fg.notices), *(f"warning: {w}" for w in fg.warnings)]:
        err_console.print(line, markup=False)
    with StopSignals() as stop:
        signum = run_foreground(fg, stop=stop, on_ready=lambda eng: _print_ready(fg, eng, json_out),
                                on_log=None if quiet else lambda line: _print_log(fg.plan.recipe, line),
                                notice=lambda text: err_console.print(text, markup=False))
    err_console.print(f"stopped {fg.plan.recipe} ({signal.Signals(signum).name})", markup=False)
    return 128 + signum  # 130 after SIGINT, 143 after SIGTERM, as shells report them


def _print_log(recipe: str, line: str) -> None:
    """Print one engine log line on stderr, prefixed with its recipe."""
    sys.stderr.write(f"[{recipe}] {line}\n")
    sys.stderr.flush()


def _print_ready(fg, eng, json_out: bool) -> None:
    """Print readiness: one JSON event line (``--json``, for scripts that wait for it) or
    the URL, probe path and argv."""
    plan = fg.plan
    if json_out:
        print(json.dumps({"event": "ready", "recipe": plan.recipe, "model": plan.model, "url": eng.url,
                          "pid": eng.pid, "argv": list(eng.argv), "probe": list(eng.probe_seen or ()),
                          "ready_ms": round((eng.ready_after or 0) * 1000), "warnings": list(fg.warnings)}),
              flush=True)
        return
    console.print(f"ready: {eng.url}  ({plan.recipe}, pid {eng.pid}, "
                  f"{(eng.ready_after or 0) * 1000:.0f} ms)", markup=False)
    if eng.probe_seen:
        console.print(f"probe: {' -> '.join(eng.probe_seen)}", markup=False)
    console.print(f"argv: {shlex.join(eng.argv)}", markup=False)
    sys.stdout.flush()


__all__ = ["run"]
