"""``lemonpack run RECIPE --model FILE``: launch one engine in the foreground (RFC section 9).

Loads the recipe, detects the host, builds the launch plan, spawns the engine, waits for
its health probe, prints the URL and the argv it ran, streams its log lines to stderr, and
on Ctrl-C (SIGINT) or SIGTERM stops it and everything it started. An engine that fails to
start or dies exits with code 7 and its last log lines. If this process is killed outright
(SIGKILL), the engine dies with it (parent-death signal) and a sentinel process removes
whatever else it started (see ``lemonpack/runtime/SUPERVISOR.md``).
"""

from __future__ import annotations

import json
import shlex
import signal
import socket
import sys
import threading
from pathlib import Path

import typer

from lemonpack.cli._app import JSON_OPTION, app, console, err_console
from lemonpack.errors import LemonpackError, RuntimeFailure


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host if host not in ("0.0.0.0", "::") else "", 0))
        return s.getsockname()[1]


def _recipe(ref: str):
    from lemonpack.contract import load_recipe

    if Path(ref).is_file() or ref.endswith(".json"):
        return load_recipe(ref)
    from lemonpack.runtime.discovery import Discovery  # a recipe id: ask discovery

    found = Discovery().scan().recipes.get(ref)
    if found is None:
        raise LemonpackError(f"no recipe file or discovered recipe named {ref!r}")
    return found.recipe


def _model(ref: str):
    from lemonpack.runtime.launch import ModelSpec

    path = Path(ref)
    if path.is_file():
        return ModelSpec(name=path.stem, checkpoints={"main": str(path.resolve())}, model_dir=str(path.resolve().parent))
    from lemonpack.runtime.models import ModelRegistry  # a registered model name

    return ModelSpec.from_entry(ModelRegistry().get(ref))


@app.command("run")
def run(
    recipe: str = typer.Argument(..., help="Recipe file (JSON) or the id of a discovered recipe."),
    model: str = typer.Option(..., "--model", "-m", help="Model file (checkpoint 'main') or a registered model name."),
    device: str | None = typer.Option(None, "--device", help="Accelerator block to use (cpu, vulkan, rocm ...)."),
    option: list[str] = typer.Option([], "--option", "-o", help="Recipe option KEY=VALUE (repeatable)."),
    port: int | None = typer.Option(None, "--port", help="Port for the engine (default: a free one)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address the engine listens on."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not stream the engine's log lines."),
    json_out: bool = JSON_OPTION,
) -> int:
    """Launch RECIPE for a model in the foreground; Ctrl-C stops it and everything it started."""
    from lemonpack.contract import detect_host
    from lemonpack.runtime.engines import Engines, run_foreground
    from lemonpack.runtime.launch import build_launch_plan  # written in parallel: imported lazily
    from lemonpack.runtime.models import parse_option

    rec = _recipe(recipe)
    spec = _model(model)
    options = dict(parse_option(o) for o in option)
    plan = build_launch_plan(rec, spec, detect_host(), device=device, port=port or _free_port(host),
                             host_addr=host, options=options)

    stop = threading.Event()
    got: list[int] = []

    def on_signal(signum, _frame):
        got.append(signum)
        stop.set()
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    engines = Engines(subreaper=True, sentinel=True)
    try:
        engines.cleanup_leftovers(container_runtimes=(plan.container_runtime,) if plan.container_name else ())
        err_console.print(f"starting {plan.recipe} for {plan.model}: {shlex.join(plan.argv)}", markup=False)

        def on_log(line: str) -> None:
            sys.stderr.write(f"[{plan.recipe}] {line}\n")
            sys.stderr.flush()

        def on_ready(eng) -> None:
            if json_out:  # one JSON line on stdout, for scripts that wait for readiness
                print(json.dumps({"event": "ready", "recipe": plan.recipe, "model": plan.model, "url": eng.url,
                                  "pid": eng.pid, "argv": list(eng.argv), "probe": list(eng.probe_seen or ()),
                                  "ready_ms": round((eng.ready_after or 0) * 1000)}), flush=True)
                return
            console.print(f"ready: {eng.url}  ({plan.recipe}, pid {eng.pid}, "
                          f"{(eng.ready_after or 0) * 1000:.0f} ms)", markup=False)
            if eng.probe_seen:
                console.print(f"probe: {' -> '.join(eng.probe_seen)}", markup=False)
            console.print(f"argv: {shlex.join(eng.argv)}", markup=False)
            sys.stdout.flush()
        try:
            run_foreground(plan, engines, on_log=None if quiet else on_log, on_ready=on_ready, stop=stop)
        except RuntimeFailure:
            if not got:
                raise
        if got:
            err_console.print(f"stopped {plan.recipe} ({signal.Signals(got[0]).name})", markup=False)
        return 0
    finally:
        engines.close()
        for s, h in old.items():
            signal.signal(s, h)


__all__ = ["run"]
