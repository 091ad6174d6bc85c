"""From a recipe, a model and a host to a :class:`LaunchPlan` (RFC sections 4.2, 4.6, 5, 7, 9, 12).

Pure: nothing is spawned and the machine is never probed. The host is an explicit
:class:`~lemonpack.contract.host.HostFacts`; the parent environment is an explicit
snapshot; the only file-system reads are the existence checks the RFC asks for (local
checkpoints of a ``lemond_managed`` model, the installed ``variant_of`` binary).

Pipeline of :func:`build_launch_plan`:

1. select the effective block: OS, accelerator (requested device, ``default_accelerator``,
   detection, first key), arch override (section 9, :func:`contract.select.select_block`);
2. build a :class:`TokenContext` (the load-time snapshot every token resolves from), over
   the options :func:`lemonpack.runtime.launch.options.launch_options` merges (the one
   merge: custom_options defaults, recipe_options, the model's, the load's);
3. passthrough: resolve ``command`` + ``args``; variant_of: call the built-in's launch
   plan (:mod:`lemonpack.runtime.launch.builtin`), re-target the executable to
   ``<cache>/external/<recipe>/<binary>`` and append the resolved ``argv_extra``;
4. append ``capability_enable_args`` of every declared capability of the model's mode
   (section 5);
5. resolve ``env`` (plan env, then manifest env), ``working_dir`` and the stop command,
   keeping ``{pid}`` literal for :meth:`LaunchPlan.stop_argv`;
6. check local checkpoints exist (``lemond_managed`` only) and spot a container launch.

The token values are :mod:`lemonpack.runtime.launch.tokens`'s, ``{custom_args}`` is
:mod:`lemonpack.runtime.launch.customargs`'s, the model and its files (and the file checks)
:mod:`lemonpack.runtime.launch.modelfiles`'s; this module composes them into the plan.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial, wraps
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lemonpack import paths
from lemonpack.contract.capabilities import capabilities_for_mode, modes_of
from lemonpack.contract.host import HostFacts
from lemonpack.contract.model import Recipe
from lemonpack.contract.select import EffectiveBlock, arch_alias, select_block
from lemonpack.contract.tokens import Token, render, render_argv
from lemonpack.errors import SelectionError, TokenError
from lemonpack.oci.cmdline import read_container_argv, valid_container_name
from lemonpack.runtime.launch.customargs import expand_custom_args
from lemonpack.runtime.launch.engine_flags import table_for
from lemonpack.runtime.launch.builtin import BuiltinInputs, builtin_plan
from lemonpack.runtime.launch.modelfiles import (ModelSpec, absolute_checkpoints, check_binary, check_checkpoints,
                                          check_installed_pin, derive_model_dir, main_checkpoint)
from lemonpack.runtime.launch.options import launch_options
from lemonpack.runtime.launch.plan import LaunchPlan
from lemonpack.runtime.launch.tokens import (OPTION_DEFAULTS, TokenContext, default_hf_cache, option_text, option_value,
                                      resolve_token)

_PID_LITERAL = "{pid}"


def deployment_mode(recipe: Recipe, requested: str | None = None) -> str | None:
    """The model's deployment mode (section 5): ``requested`` (checked against the declared
    capabilities), else the first declared capability that has a mode; None when the recipe
    declares only plumbing. Raises :class:`SelectionError` when ``requested`` is a mode no
    declared capability has."""
    modes = modes_of(recipe.capabilities)
    if requested is None:
        return modes[0] if modes else None
    if requested not in modes:
        raise SelectionError(f"{recipe.file}: recipe {recipe.recipe!r} cannot deploy a model in mode "
                             f"{requested!r} (its capabilities give: {', '.join(modes) or 'none'})")
    return requested


def container_of(argv: Sequence[str]) -> tuple[str | None, str | None]:
    """``(runtime, name)`` when ``argv`` runs a named container (a container CLI's ``run``
    with ``--name X``/``--name=X``, read by :func:`lemonpack.oci.cmdline.read_container_argv`:
    any of its CLIs, global options, ``container run``, wrappers in front), else
    ``(None, None)``. ``runtime`` is the CLI's basename (``podman``, ``nerdctl`` ...).
    Raises :class:`~lemonpack.oci.cmdline.UnreadableCommandLine` for an argv that cannot be
    read unambiguously."""
    inv = read_container_argv(argv)
    if inv is None or inv.subcommand != "run" or inv.name is None:
        return None, None
    return inv.engine, inv.name


def _valid_names(argv: list[str], stop: tuple[str, ...] | None) -> tuple[list[str], tuple[str, ...] | None]:
    """Make the container name of a ``run`` argv valid (:func:`valid_container_name`: a model
    name such as ``Qwen3:Q4_K_M.gguf`` may land in ``--name lp-{model_name}``) and give every
    stop-argv element equal to the old name the new one, so stop and clean-up find it."""
    inv = read_container_argv(argv)
    if inv is None or inv.subcommand != "run" or inv.name is None:
        return argv, stop
    safe = valid_container_name(inv.name)
    if safe == inv.name:
        return argv, stop
    argv = list(inv.with_name(argv, safe))
    if stop is not None:
        stop = tuple(safe if a == inv.name else f"--name={safe}" if a == f"--name={inv.name}" else a for a in stop)
    return argv, stop


def _exe_dir(recipe: Recipe, eff: EffectiveBlock, external: Path) -> str:
    if recipe.variant_of is None and eff.command and "{" not in eff.command and os.path.isabs(eff.command):
        return os.path.dirname(eff.command)
    return str(external)


class _Recorder:
    """Resolves through :func:`resolve_token` and remembers the checkpoints referenced."""

    def __init__(self, ctx: TokenContext):
        self.ctx = ctx
        self.checkpoints: dict[str, None] = {}

    def __call__(self, token: Token) -> str:
        if token.kind in ("checkpoint", "checkpoint_relative"):
            self.checkpoints[token.name or ""] = None
        elif token.kind in ("resolved_path", "model_relative_path"):
            main = next((n for n, p in self.ctx.checkpoints.items() if p == self.ctx.resolved_path), None)
            if main is not None:
                self.checkpoints[main] = None
        return resolve_token(token, self.ctx)

    def stop(self, token: Token) -> str:
        """For stop commands: ``{pid}`` stays literal; no other value may smuggle one in."""
        if token.kind == "pid":
            return _PID_LITERAL
        value = self(token)
        if _PID_LITERAL in value:
            raise TokenError(f"token {token.text} resolved to {value!r}, which contains {_PID_LITERAL}")
        return value


# ---------------------------------------------------------------------------- the plan

def _name_the_file(fn):
    """Prefix token errors with the recipe file: the field path alone does not say which recipe."""
    @wraps(fn)
    def wrapper(recipe: Recipe, *args, **kwargs):
        try:
            return fn(recipe, *args, **kwargs)
        except TokenError as e:
            if str(e).startswith(recipe.file):
                raise
            raise TokenError(f"{recipe.file}: {e}") from None
    return wrapper


@_name_the_file
def build_launch_plan(recipe: Recipe, model: ModelSpec, host: HostFacts, *, device: str | None = None,
                      port: int, host_addr: str = "127.0.0.1", options: Mapping[str, Any] | None = None,
                      cache_root: str | os.PathLike[str] | None = None, mode: str | None = None,
                      environ: Mapping[str, str] | None = None, install_ref: str | None = None,
                      external_dir: str | os.PathLike[str] | None = None, check_files: bool = True) -> LaunchPlan:
    """Resolve ``recipe`` for ``model`` on ``host`` into a :class:`LaunchPlan` (sections 4.2, 5, 7, 9).

    ``device`` is the requested accelerator key (else the ``device`` option);
    ``port``/``host_addr`` where the engine listens; ``options`` load-time recipe options
    over the model's and the recipe's; ``cache_root`` the lemonpack cache (default
    :func:`lemonpack.paths.cache_root`), under which ``external/<recipe>/<binary>`` is the
    variant_of executable; ``mode`` the deployment mode (else the model's, else the
    first declared capability's); ``environ`` the parent environment snapshot (default:
    a copy of :data:`os.environ`); ``install_ref`` how the user named the recipe (its
    file or its id), used in the ``lemonpack install ...`` hint of a missing binary
    (default: the recipe id); ``external_dir`` where a variant_of recipe's ``binary`` lives
    instead of ``<cache>/external/<recipe>`` (an image's ``/opt/lemonpack/<recipe>``);
    ``check_files`` False to skip every check of this machine's files (the variant_of binary,
    its install record, local checkpoints): for a plan that runs elsewhere (a pod), whose
    paths name another file system.

    Raises :class:`SelectionError` when the host OS has no block or the mode is not
    declared; :class:`TokenError` for any token that cannot resolve, a leading-dash value,
    a reserved flag in ``{custom_args}``, a denied ``{env:}``;
    :class:`MissingCheckpointError` when a ``lemond_managed`` model references a missing
    local checkpoint; :class:`MissingBinaryError` when a variant_of binary is not
    installed; :class:`~lemonpack.runtime.launch.builtin.UnsupportedBuiltinError` for a
    variant_of with no launch plan.
    """
    env_snapshot = dict(os.environ if environ is None else environ)
    merged, eff = _block(recipe, model, host, device, options)
    chosen_mode = deployment_mode(recipe, mode or model.mode)

    cache = Path(cache_root) if cache_root is not None else paths.cache_root()
    if external_dir is not None:
        external = Path(external_dir)
    else:
        external = cache / "external" / recipe.recipe if cache_root is not None else paths.external_dir(recipe.recipe)
    hf_cache = default_hf_cache(env_snapshot)
    model_dir = derive_model_dir(model, hf_cache)
    checkpoints = absolute_checkpoints(model, model_dir)
    resolved = main_checkpoint(checkpoints)

    option_tokens: dict[str, Any] = {name: option_value(merged, name) for name in OPTION_DEFAULTS}
    ctx = TokenContext(
        recipe=recipe.recipe, model_name=model.name, port=port, host=host_addr,
        log_level=option_text("log_level", merged.get("log_level", "info")),
        checkpoints=MappingProxyType(checkpoints), model_dir=model_dir, resolved_path=resolved,
        hf_cache=hf_cache, cache_dir=str(cache), exe_dir=_exe_dir(recipe, eff, external),
        **option_tokens,
        recipe_options=merged, custom_args=merged.get("custom_args"),
        reserved_args=eff.reserved_args, environ=MappingProxyType(env_snapshot),
        host_facts=host, accelerator=eff.accelerator, gpu_arch=eff.gpu_arch,
        arch_alias_resolver=partial(arch_alias, recipe) if recipe.arch_aliases else None,
    )
    rec = _Recorder(ctx)
    expand = partial(expand_custom_args, ctx.custom_args, ctx.reserved_args, ctx.engine_flags)
    health = recipe.health_probe
    env: dict[str, str] = {}
    working_dir: str | None = None

    if recipe.variant_of is None:
        if not eff.command:
            raise SelectionError(f"{recipe.file}: {eff.path} has no command")
        executable = render(eff.command, rec, where=f"{eff.path}.command")
        # A known engine binary (llama-server, ...) gets its option table for {custom_args}.
        ctx = replace(ctx, engine_flags=table_for(executable=executable))
        rec.ctx = ctx
        expand = partial(expand_custom_args, ctx.custom_args, ctx.reserved_args, ctx.engine_flags)
        argv = [executable] + render_argv(eff.args, rec, expand, where=f"{eff.path}.args")
    else:
        inputs = BuiltinInputs(
            model_path=render("{checkpoint:main}", rec, where=f"{recipe.variant_of} launch plan -m"),
            port=render("{port}", rec, where="port"), host=render("{host}", rec, where="host"),
            ctx_size=render("{ctx_size}", rec, where="ctx_size"), mode=chosen_mode,
            mmproj_path=(render("{checkpoint:mmproj}", rec, where="mmproj") if "mmproj" in checkpoints else None))
        built = builtin_plan(recipe.variant_of, inputs)
        # Reserved flags for {custom_args}: the manifest's (block, then top level), then the built-in's.
        reserved = eff.reserved_args + tuple(a for a in built.reserved_args if a not in eff.reserved_args)
        ctx = replace(ctx, reserved_args=reserved, engine_flags=table_for(recipe.variant_of))
        rec.ctx = ctx
        expand = partial(expand_custom_args, ctx.custom_args, ctx.reserved_args, ctx.engine_flags)
        if not eff.binary:
            raise SelectionError(f"{recipe.file}: {eff.path} has no binary")
        executable = str(external / eff.binary)
        if check_files:
            check_binary(install_ref or recipe.recipe, executable)
            check_installed_pin(install_ref or recipe.recipe, external, eff)
        argv = [executable, *built.argv[1:]]
        argv += render_argv(eff.argv_extra, rec, expand, where=f"{eff.path}.argv_extra")
        if "{custom_args}" not in eff.argv_extra and "{custom_args}" not in _enable_templates(recipe, chosen_mode):
            argv += expand()
        env.update(built.env)
        working_dir = built.working_dir
        if built.health_probe is not None and "health_probe" not in recipe.document:
            health = built.health_probe

    for cap in capabilities_for_mode(recipe.capabilities, chosen_mode) if chosen_mode else ():
        templates = recipe.capability_enable_args.get(cap)
        if templates:
            argv += render_argv(templates, rec, expand, where=f"capability_enable_args.{cap}")

    for key, template in eff.env.items():
        env[key] = render(template, rec, where=f"{eff.path}.env.{key}")
    if eff.working_dir is not None:
        working_dir = render(eff.working_dir, rec, where=f"{eff.path}.working_dir")
    stop: tuple[str, ...] | None = None
    if eff.stop_command:
        stop = (render(eff.stop_command, rec.stop, where=f"{eff.path}.stop_command"),
                *render_argv(eff.stop_command_args, rec.stop, None, where=f"{eff.path}.stop_command_args"))

    if check_files and recipe.model_management != "self_managed":
        check_checkpoints(model.name, {n: checkpoints[n] for n in rec.checkpoints if n in checkpoints})

    argv, stop = _valid_names(argv, stop)
    runtime, name = container_of(argv)
    return LaunchPlan(
        recipe=recipe.recipe, model=model.name, executable=argv[0], argv=tuple(argv),
        env=MappingProxyType(env), working_dir=working_dir, host=host_addr, port=port,
        health_probe=health, stop_argv_template=stop, container_name=name, container_runtime=runtime,
        platform_path=eff.path, accelerator=eff.accelerator, gpu_arch=eff.gpu_arch, mode=chosen_mode,
    )


def _block(recipe: Recipe, model: ModelSpec, host: HostFacts, device: str | None,
           options: Mapping[str, Any] | None) -> tuple[Mapping[str, Any], EffectiveBlock]:
    """The merged launch options and the effective block a launch of ``model`` on ``host``
    uses: the one block selection of :func:`build_launch_plan` and :func:`launch_images`."""
    merged = launch_options(recipe, model.recipe_options, options)
    return merged, select_block(recipe, host, device or merged.get("device"))


def launch_images(recipe: Recipe, model: ModelSpec, host: HostFacts, *, device: str | None = None,
                  options: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The container images the launch plan of ``recipe`` for ``model`` on ``host`` runs (each
    once, argv order; ``()`` for a ``variant_of`` recipe or a command that is no container run),
    read from the effective block :func:`build_launch_plan` would use (same ``device`` and
    ``options``), without building the plan: no token resolved, no port taken, no file of this
    machine looked at. The same images as the plan's argv, since the pinning policy
    (:mod:`lemonpack.oci.policy`) admits only literal ``name@sha256:`` images in ``command``
    and ``args``; an image a user's ``{custom_args}`` adds is not listed (the check before the
    spawn judges the plan's argv). Raises :class:`SelectionError` as :func:`build_launch_plan`
    (no block for the host), ``UnreadableCommandLine`` for an argv the container reader refuses."""
    from lemonpack.oci.policy import container_images

    _merged, eff = _block(recipe, model, host, device, options)
    if recipe.variant_of is not None or not eff.command:
        return ()
    return container_images(eff.command, eff.args)


def _enable_templates(recipe: Recipe, mode: str | None) -> tuple[str, ...]:
    if mode is None:
        return ()
    out: list[str] = []
    for cap in capabilities_for_mode(recipe.capabilities, mode):
        out.extend(recipe.capability_enable_args.get(cap, ()))
    return tuple(out)


__all__ = ["build_launch_plan", "container_of", "deployment_mode", "launch_images"]
