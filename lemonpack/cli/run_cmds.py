"""``lemonpack run RECIPE --model FILE``: launch one engine in the foreground (RFC section 9).

Loads the recipe, detects the host, builds the launch plan, spawns the engine, waits for
its health probe, prints the URL and the argv it ran, streams its log lines to stderr, and
on Ctrl-C (SIGINT) or SIGTERM stops it and everything it started. An engine that fails to
start or dies exits with code 7 and its last log lines; a stop by SIGINT exits 130, by
SIGTERM 143 (as shells report them), after everything was stopped. The engine is driven by
:class:`lemonpack.runtime.runner.Runner` (the supervisor), the same driver the server uses;
at start-up, leftovers of dead runtimes (labelled containers, tagged processes) are removed
whatever the recipe. Runtime warnings (clean-up failures) are logged to stderr. If this process is killed outright
(SIGKILL), the engine dies with it (parent-death signal) and a sentinel process removes
whatever else it started (see ``lemonpack/runtime/SUPERVISOR.md``).

Before anything is spawned: RECIPE is resolved by :func:`lemonpack.cli._app.resolve_recipe`
(a file, or a discovered id); a recipe whose container images are not pinned by digest is
refused with the ``lint``/``build`` problems; ``--device`` must name an accelerator block
the recipe has for this OS and ``--port`` must be 1..65535 and free (usage errors, exit 2,
as for ``lemonpack serve``); ``--model`` that looks like a path
(a ``/`` or a model file suffix) and is not a file is "model file not found". The
``starting`` line names the health probe it waits for.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import typer

from lemonpack.cli._app import JSON_OPTION, app, console, err_console, resolve_recipe
from lemonpack.cli.stop_signals import StopSignals
from lemonpack.errors import LemonpackError, RuntimeFailure


def _free_port(host: str) -> int:
    """A free TCP port on ``host``; a usage error (exit 2) when ``host`` cannot be bound."""
    from lemonpack.runtime.engines import free_port

    try:
        return free_port(host)
    except OSError as e:
        raise typer.BadParameter(f"cannot listen on {host!r}: {e.strerror or e}", param_hint="--host") from None


def _model(ref: str):
    """``(ModelSpec, recipe the model is registered for or None)`` for a file or a registered name."""
    from lemonpack.runtime.launch import ModelSpec
    from lemonpack.runtime.models import ModelRegistry, looks_like_path  # a registered model name

    path = Path(ref)
    if path.is_file():
        spec = ModelSpec(name=path.stem, checkpoints={"main": str(path.resolve())},
                         model_dir=str(path.resolve().parent))
        return spec, None
    if looks_like_path(ref):
        registry = ModelRegistry()
        if "/" not in ref and ref in registry.load():  # e.g. a model registered as user.x.gguf
            entry = _local(registry.get(ref))
            return ModelSpec.from_entry(entry), entry.recipe
        if path.exists():
            raise LemonpackError(f"model path is not a file: {ref}")
        raise LemonpackError(f"model file not found: {ref}")
    entry = _local(ModelRegistry().get(ref))
    return ModelSpec.from_entry(entry), entry.recipe


def _local(entry):
    """``entry``, unless it is an endpoint model (served by engines lemonpack does not spawn:
    ``lemonpack serve`` is its gateway, ``run`` has nothing to start)."""
    if entry.endpoints:
        raise LemonpackError(f"model {entry.name!r} is served by its endpoints ({', '.join(entry.endpoints)}); "
                             "lemonpack run does not start it (lemonpack serve is its gateway)")
    return entry


def _check_device(rec, host, device: str | None) -> None:
    """A usage error when ``device`` is not an accelerator block of ``rec`` for the host OS."""
    blocks = rec.platforms.get(host.os)
    if device is None or not blocks or device in blocks:
        return  # no block for the OS at all: build_launch_plan says so
    raise typer.BadParameter(f"recipe {rec.recipe!r} has no {device!r} block for {host.os} "
                             f"(it offers: {', '.join(blocks)})", param_hint="'--device'")


def _lacking_warnings(rec, spec, facts, accelerator: str | None, device: str | None, options) -> list[str]:
    """The warning (a list of 0 or 1) when the chosen block is for an accelerator the host
    lacks; the device asked for is ``--device``, else the ``device`` option."""
    from lemonpack.contract.select import lacking_accelerator_warning

    if accelerator is None:
        return []
    asked = device or options.get("device") or spec.recipe_options.get("device") or rec.recipe_options.get("device")
    w = lacking_accelerator_warning(rec, facts, accelerator, requested=asked,
                                    requested_by="--device" if device else "the device option")
    return [w] if w else []


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
    json_out: bool = JSON_OPTION,
) -> int:
    """Launch RECIPE for a model in the foreground; Ctrl-C stops it and everything it started."""
    from lemonpack.oci.policy import require_pinned
    from lemonpack.contract import detect_host
    from lemonpack.contract.model import HealthProbe
    from lemonpack.runtime.engines import check_port_free
    from lemonpack.runtime.launch import build_launch_plan  # written in parallel: imported lazily
    from lemonpack.runtime.models import parse_option
    from lemonpack.runtime.probes import describe_probe

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
    rec = resolve_recipe(recipe)
    require_pinned(rec)  # the lint/build digest-pinning policy: ManifestError with every problem
    facts = detect_host()
    _check_device(rec, facts, device)
    spec, registered_for = _model(model)
    if registered_for and registered_for != rec.recipe:
        err_console.print(f"warning: model {model!r} is registered for recipe {registered_for!r}, "
                          f"running it with {rec.recipe!r}", markup=False)
    if not host.strip():
        raise typer.BadParameter("an address is required, e.g. 127.0.0.1", param_hint="--host")
    try:
        options = dict(parse_option(o) for o in option)
    except LemonpackError as e:
        raise typer.BadParameter(str(e), param_hint="'--option' / '-o'") from None
    if port is not None:
        try:  # a usage error, as for `lemonpack serve --port` (exit 2)
            check_port_free(host, port)
        except LemonpackError as e:
            raise typer.BadParameter(str(e), param_hint="--port") from None
    else:
        port = _free_port(host)
    plan = build_launch_plan(rec, spec, facts, device=device, port=port,
                             host_addr=host, options=options, install_ref="--example" if example else recipe)
    warnings = _lacking_warnings(rec, spec, facts, plan.accelerator, device, options)
    for w in warnings:
        err_console.print(f"warning: {w}", markup=False)
    probe_text = describe_probe(plan.health_probe, plan.host, plan.port)
    if "health_probe" not in rec.document and plan.health_probe == HealthProbe():
        probe_text += "; the default probe: the recipe sets no health_probe"

    def on_log(line: str) -> None:
        sys.stderr.write(f"[{plan.recipe}] {line}\n")
        sys.stderr.flush()

    def on_spawn(_model: str, eng) -> None:
        if not quiet:
            eng.logs.subscribe(on_log, replay=True)

    def on_ready(eng) -> None:
        if json_out:  # one JSON line on stdout, for scripts that wait for readiness
            print(json.dumps({"event": "ready", "recipe": plan.recipe, "model": plan.model, "url": eng.url,
                              "pid": eng.pid, "argv": list(eng.argv), "probe": list(eng.probe_seen or ()),
                              "ready_ms": round((eng.ready_after or 0) * 1000), "warnings": warnings}),
                  flush=True)
            return
        console.print(f"ready: {eng.url}  ({plan.recipe}, pid {eng.pid}, "
                      f"{(eng.ready_after or 0) * 1000:.0f} ms)", markup=False)
        if eng.probe_seen:
            console.print(f"probe: {' -> '.join(eng.probe_seen)}", markup=False)
        console.print(f"argv: {shlex.join(eng.argv)}", markup=False)
        sys.stdout.flush()

    with StopSignals() as stop:
        _run_until_stopped(plan, stop, probe_text, on_spawn, on_ready)
    err_console.print(f"stopped {plan.recipe} ({signal.Signals(stop.got[0]).name})", markup=False)
    return 128 + stop.got[0]  # 130 after SIGINT, 143 after SIGTERM, as shells report them


def _run_until_stopped(plan, stop: StopSignals, probe_text: str, on_spawn, on_ready) -> None:
    """Start ``plan``'s engine, wait until ``stop`` (a signal), then stop everything; a failed
    start or a crash raises (exit 7)."""
    from lemonpack.runtime.engines import Engines
    from lemonpack.runtime.probes import failure
    from lemonpack.runtime.runner import Runner
    from lemonpack.runtime.supervisor import State

    got = stop.got
    engines = Engines(subreaper=True, sentinel=True)
    runner = Runner({plan.model: plan}, engines, on_spawn=on_spawn)
    try:
        left = engines.cleanup_leftovers()  # every container CLI installed, whatever this recipe is
        if left["containers"] or left["processes"]:
            err_console.print(f"removed leftovers of dead runtimes: containers {left['containers']}, "
                              f"processes {left['processes']}", markup=False)
        err_console.print(f"starting {plan.recipe} for {plan.model}, waiting for its health probe ({probe_text}): "
                          f"{shlex.join(plan.argv)}", markup=False)
        eng = _wait_ready(runner, plan.model, stop, got)
        if eng is not None:
            on_ready(eng)
            while not stop.wait(0.1):  # until a signal, or the supervisor saw a crash
                if runner.state(plan.model) is not State.READY:
                    if not got:
                        raise failure(f"{plan.recipe}: {runner.last_error(plan.model) or 'engine stopped'}",
                                      eng.logs)
                    break
    finally:
        runner.close()
        engines.close()


def _wait_ready(runner, model: str, stop: StopSignals, got: list[int]):
    """The ready engine of ``model``; None when a signal came first (the start is then
    cancelled by the runner's close). A failed start raises its RuntimeFailure."""
    fut = runner.request(model)
    while not stop.is_set():
        try:
            return fut.result(0.1)
        except FutureTimeout:
            continue
        except RuntimeFailure:
            if got:
                return None
            raise
    return None


__all__ = ["run"]
