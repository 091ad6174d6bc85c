"""``lemonpack run``'s job: one engine in the foreground until a signal (RFC section 9).

Two steps, so the CLI only parses and prints:

- :func:`prepare_run` turns the command's arguments into a :class:`ForegroundRun`: the
  recipe (:meth:`lemonpack.runtime.recipes.discovery.Discovery.resolve`: a file or a discovered id),
  refused when a container image is not pinned by digest (the ``lint``/``build`` policy);
  the host facts (detected); the model (:func:`lemonpack.runtime.models.ref.resolve_model`);
  the ``--device`` block, ``--host``, ``--option`` and ``--port`` checked (each a
  :class:`~lemonpack.errors.UsageError`, exit 2, as for ``lemonpack serve``); the launch plan;
  the warnings (a block for an accelerator the host lacks) and notices (a model registered for
  another recipe).
- :func:`run_foreground` runs that plan with the supervisor's driver
  (:class:`lemonpack.runtime.lifecycle.runner.Runner`, the one the server uses): it removes the
  leftovers of dead runtimes (labelled containers, tagged processes, whatever the recipe),
  starts the engine, waits for its health probe, reports readiness, then waits for SIGINT or
  SIGTERM (:class:`~lemonpack.runtime.lifecycle.stop_signals.StopSignals`: a handler only records the
  signal and writes a byte to a pipe) or a crash, and stops everything it started. A failed
  start or a crash raises :class:`~lemonpack.errors.RuntimeFailure` (exit 7) with the last log
  lines; a signal returns its number (the CLI exits ``128 + signum``: 130, 143). If this
  process is killed outright (SIGKILL) the engine dies with it (parent-death signal) and a
  sentinel process removes whatever else it started (``SUPERVISOR.md``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lemonpack.contract.host import HostFacts
from lemonpack.contract.model import Recipe
from lemonpack.errors import LemonpackError, RuntimeFailure, UsageError
from lemonpack.runtime.launch.plan import LaunchPlan
from lemonpack.runtime.lifecycle.stop_signals import StopSignals

if TYPE_CHECKING:
    from lemonpack.trust.check import Trust


@dataclass(frozen=True)
class ForegroundRun:
    """A checked foreground run: the ``recipe``, the launch ``plan``, ``warnings`` (also in
    the ``ready`` JSON event), ``notices`` (stderr only), ``probe_text`` (what the health
    probe waits for, :func:`lemonpack.runtime.engines.probes.describe_probe`), and ``trust``
    (the :class:`~lemonpack.trust.check.Trust` of ``--policy``/``--registries.d`` the plan was
    judged with, and the check before the spawn judges with again; None: the default places)."""

    recipe: Recipe
    plan: LaunchPlan
    warnings: tuple[str, ...]
    notices: tuple[str, ...]
    probe_text: str
    trust: Trust | None = None


def prepare_run(recipe_ref: str, model_ref: str, *, device: str | None = None, options: Sequence[str] = (),
                port: int | None = None, host: str = "127.0.0.1", install_ref: str | None = None,
                facts: HostFacts | None = None, policy: str | os.PathLike[str] | None = None,
                registries_d: str | os.PathLike[str] | None = None) -> ForegroundRun:
    """Check the arguments of ``lemonpack run`` and build its launch plan (nothing spawned).

    ``recipe_ref``: a recipe file or discovered id; ``model_ref``: a model file or a
    registered name; ``device``: the accelerator block (None: the selector's choice);
    ``options``: ``KEY=VALUE`` texts; ``port``: 1..65535 and free, or None for a free one;
    ``host``: the engine's listen address; ``install_ref``: how messages name the install
    (default ``recipe_ref``); ``facts``: the host (default: detected); ``policy``,
    ``registries_d``: the trust policy and registries.d to judge engine images with
    (``--policy``, ``--registries.d``; read first, so a bad file named fails before anything
    else; None: the default places, read only when the plan names a registry image). Raises
    :class:`~lemonpack.errors.UsageError` (exit 2) for ``--device``, ``--host``,
    ``--option`` and ``--port``; :class:`~lemonpack.errors.ManifestError` for an unpinned
    image; :class:`~lemonpack.errors.TrustError` (exit 3) for an engine image the trust
    policy rejects (:func:`~lemonpack.runtime.lifecycle.runner.trusted_plan`); what :meth:`Discovery.resolve`, :func:`resolve_model` and
    :func:`~lemonpack.runtime.launch.build.build_launch_plan` raise."""
    from lemonpack.contract import detect_host
    from lemonpack.contract.model import HealthProbe
    from lemonpack.oci.policy import require_pinned
    from lemonpack.runtime.recipes.discovery import Discovery
    from lemonpack.runtime.engines.ports import check_port_free, free_port
    from lemonpack.runtime.launch.build import build_launch_plan
    from lemonpack.runtime.lifecycle.runner import trusted_plan
    from lemonpack.runtime.models.ref import resolve_model
    from lemonpack.runtime.models.registry import parse_option
    from lemonpack.runtime.engines.probes import describe_probe
    from lemonpack.trust.check import Trust

    trust = Trust.named(policy, registries_d)
    rec = Discovery().resolve(recipe_ref)
    require_pinned(rec)
    facts = facts if facts is not None else detect_host()
    blocks = rec.platforms.get(facts.os)
    if device is not None and blocks and device not in blocks:  # no block for the OS: the plan says so
        raise UsageError(f"recipe {rec.recipe!r} has no {device!r} block for {facts.os} "
                         f"(it offers: {', '.join(blocks)})", param="--device")
    model = resolve_model(model_ref)
    notices = []
    if model.recipe and model.recipe != rec.recipe:
        notices.append(f"model {model_ref!r} is registered for recipe {model.recipe!r}, running it with {rec.recipe!r}")
    if not host.strip():
        raise UsageError("an address is required, e.g. 127.0.0.1", param="--host")
    try:
        opts = dict(parse_option(o) for o in options)
    except LemonpackError as e:
        raise UsageError(str(e), param="'--option' / '-o'") from None
    try:
        if port is not None:
            check_port_free(host, port)
        else:
            port = free_port(host)
    except LemonpackError as e:
        raise UsageError(str(e), param="--port") from None
    except OSError as e:
        raise UsageError(f"cannot listen on {host!r}: {e.strerror or e}", param="--host") from None
    spec = model.spec()
    plan = build_launch_plan(rec, spec, facts, device=device, port=port, host_addr=host, options=opts,
                             install_ref=install_ref or recipe_ref)
    plan = trusted_plan(plan, trust)  # the trust policy, before anything is spawned
    warnings = _lacking(rec, spec, facts, plan.accelerator, device, opts)
    probe_text = describe_probe(plan.health_probe, plan.host, plan.port)
    if "health_probe" not in rec.document and plan.health_probe == HealthProbe():
        probe_text += "; the default probe: the recipe sets no health_probe"
    return ForegroundRun(rec, plan, tuple(warnings), tuple(notices), probe_text, trust)


def _lacking(rec, spec, facts, accelerator: str | None, device: str | None, options) -> list[str]:
    """The warning (a list of 0 or 1) when the chosen block is for an accelerator the host
    lacks; the device asked for is ``--device``, else the ``device`` option."""
    from lemonpack.contract.select import lacking_accelerator_warning
    from lemonpack.runtime.launch.options import launch_options

    if accelerator is None:
        return []
    asked = device or launch_options(rec, spec.recipe_options, options).get("device")  # as the plan reads it
    w = lacking_accelerator_warning(rec, facts, accelerator, requested=asked,
                                    requested_by="--device" if device else "the device option")
    return [w] if w else []


def run_foreground(run: ForegroundRun, *, on_ready: Callable[[object], None],
                   on_log: Callable[[str], None] | None = None,
                   notice: Callable[[str], None] = lambda _text: None,
                   stop: StopSignals | None = None) -> int:
    """Run ``run``'s engine until SIGINT/SIGTERM; returns the signal number that stopped it.

    ``on_ready(engine)`` is called once the health probe answered (the engine handle:
    ``url``, ``pid``, ``argv``, ``probe_seen``, ``ready_after`` seconds); ``on_log(line)``
    receives every log line of the engine (replayed from its start; None: not subscribed);
    ``notice(text)`` gets the progress lines (leftovers removed, "starting ..."). ``stop``:
    an installed :class:`StopSignals` (default: one installed for the call, main thread
    only). Everything started is stopped before this returns or raises. Raises
    :class:`~lemonpack.errors.RuntimeFailure` (exit 7) when the engine fails to start or
    dies while no signal came."""
    if stop is None:
        with StopSignals() as own:
            return run_foreground(run, on_ready=on_ready, on_log=on_log, notice=notice, stop=own)
    _run_until_stopped(run, stop, on_ready, on_log, notice)
    return stop.got[0]


def _run_until_stopped(run: ForegroundRun, stop: StopSignals, on_ready, on_log, notice) -> None:
    import shlex

    from lemonpack.runtime.engines.handles import Engines
    from lemonpack.runtime.engines.probes import failure
    from lemonpack.runtime.lifecycle.runner import Runner
    from lemonpack.runtime.lifecycle.supervisor import State

    plan, got = run.plan, stop.got

    def on_spawn(_model: str, eng) -> None:
        if on_log is not None:
            eng.logs.subscribe(on_log, replay=True)

    engines = Engines(subreaper=True, sentinel=True)
    runner = Runner({plan.model: plan}, engines, on_spawn=on_spawn, trust=run.trust)
    try:
        left = engines.cleanup_leftovers()  # every container CLI installed, whatever this recipe is
        if left["containers"] or left["processes"]:
            notice(f"removed leftovers of dead runtimes: containers {left['containers']}, "
                   f"processes {left['processes']}")
        notice(f"starting {plan.recipe} for {plan.model}, waiting for its health probe ({run.probe_text}): "
               f"{shlex.join(plan.argv)}")
        eng = _wait_ready(runner, plan.model, stop)
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


def _wait_ready(runner, model: str, stop: StopSignals):
    """The ready engine of ``model``; None when a signal came first (the start is then
    cancelled by the runner's close). A failed start raises its RuntimeFailure."""
    fut = runner.request(model)
    while not stop.is_set():
        try:
            return fut.result(0.1)
        except FutureTimeout:
            continue
        except RuntimeFailure:
            if stop.got:
                return None
            raise
    return None


__all__ = ["ForegroundRun", "prepare_run", "run_foreground"]
