"""From a recipe, a model and a host to a :class:`LaunchPlan` (RFC sections 4.2, 4.6, 5, 7, 9, 12).

Pure: nothing is spawned and the machine is never probed. The host is an explicit
:class:`~lemonpack.contract.host.HostFacts`; the parent environment is an explicit
snapshot; the only file-system reads are the existence checks the RFC asks for (local
checkpoints of a ``lemond_managed`` model, the installed ``variant_of`` binary).

Pipeline of :func:`build_launch_plan`:

1. select the effective block: OS, accelerator (requested device, ``default_accelerator``,
   detection, first key), arch override (section 9, :func:`contract.select.select_block`);
2. build a :class:`TokenContext` (the load-time snapshot every token resolves from);
3. passthrough: resolve ``command`` + ``args``; variant_of: call the built-in's launch
   plan (:mod:`lemonpack.runtime.launchplans`), re-target the executable to
   ``<cache>/external/<recipe>/<binary>`` and append the resolved ``argv_extra``;
4. append ``capability_enable_args`` of every declared capability of the model's mode
   (section 5);
5. resolve ``env`` (plan env, then manifest env), ``working_dir`` and the stop command,
   keeping ``{pid}`` literal for :meth:`LaunchPlan.stop_argv`;
6. check local checkpoints exist (``lemond_managed`` only) and spot a container launch.

Token values (section 4.2), with the documented defaults lemonpack uses:

- runtime: ``{port}``, ``{host}`` (``127.0.0.1``), ``{log_level}`` (option ``log_level``,
  default ``info``), ``{recipe}``, ``{model_name}``; ``{pid}`` only in ``stop_command`` /
  ``stop_command_args``, filled in after spawn;
- checkpoints: ``{checkpoint:NAME}`` the absolute path of checkpoint NAME (relative paths
  are taken relative to ``{model_dir}``); ``{checkpoint_relative:NAME}`` that path relative
  to ``{model_dir}`` (a checkpoint outside it is an error); ``{resolved_path}`` the main
  checkpoint (``main``, or the only one); ``{model_relative_path}`` that path relative to
  ``{model_dir}``; ``{model_dir}`` the model's directory (the model's own ``model_dir``,
  else ``{hf_cache}`` when the main checkpoint lies in it, else the main checkpoint's
  parent); ``{hf_cache}`` the Hugging Face hub cache (``HF_HUB_CACHE``,
  ``HUGGINGFACE_HUB_CACHE``, ``$HF_HOME/hub``, ``$XDG_CACHE_HOME/huggingface/hub``,
  ``$HOME/.cache/huggingface/hub``, from the environment snapshot); ``{cache_dir}`` the
  lemonpack cache root; ``{exe_dir}`` ``<cache>/external/<recipe>`` for variant_of, the
  directory of a literal absolute ``command`` for passthrough, else ``<cache>/external/<recipe>``;
- hardware: ``{rocm_arch}``/``{cuda_arch}`` the host's arch (error when absent);
  ``{arch_alias}`` through ``arch_aliases`` for the selected GPU arch (error when
  unmapped, never empty); ``{target_device}`` the selected accelerator key (``rocm``,
  ``cuda``, ``vulkan``, ``cpu`` ...); ``{hip_visible_devices}``, ``{cuda_visible_devices}``,
  ``{rocr_visible_devices}``, ``{ggml_vk_visible_devices}``, ``{ze_affinity_mask}`` the
  option of the same name when set, else ``0`` (the first device);
- options (option of the same name, else the default): ``{ctx_size}`` 4096 (Lemonade's
  default), ``{batch_size}`` 2048, ``{ubatch_size}`` 512, ``{threads}`` -1 (llama.cpp's
  "decide yourself"; a validated negative number), ``{cache_type_k}``/``{cache_type_v}`` f16;
- custom: ``{custom:NAME}`` / ``{custom:NAME:-DEFAULT}`` from the merged recipe options
  (recipe defaults, then model options, then load options); ``{custom_args}`` from the
  ``custom_args`` option, a string split with :func:`shlex.split` (a string holding a JSON
  array is read as the array) or a list, each element checked against reserved_args;
- env: ``{env:NAME}`` / ``{env:NAME:-DEFAULT}`` through :mod:`lemonpack.runtime.envallow`.

Every token value that begins with ``-`` is rejected unless it is a validated negative
number; that rule lives in :func:`lemonpack.contract.tokens.render` and is reused here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial, wraps
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lemonpack import paths
from lemonpack.contract.capabilities import CAPABILITIES, capabilities_for_mode
from lemonpack.contract.host import HostFacts
from lemonpack.contract.model import EMPTY, Recipe
from lemonpack.contract.select import EffectiveBlock, arch_alias, select_block
from lemonpack.contract.tokens import Token, TokenSyntaxError, parse_template, render, render_argv
from lemonpack.errors import LemonpackError, SelectionError, TokenError
from lemonpack.oci.cmdline import read_container_argv, valid_container_name
from lemonpack.runtime.engine_flags import EngineFlagTable, table_for
from lemonpack.runtime.envallow import DEFAULT_ALLOWLIST, resolve_env
from lemonpack.runtime.launchplans import BuiltinInputs, builtin_plan
from lemonpack.runtime.plan import LaunchPlan

#: Defaults of the option tokens (section 4.2) when neither the recipe, the model nor
#: the load sets the option of the same name.
OPTION_DEFAULTS: Mapping[str, str] = MappingProxyType({
    "ctx_size": "4096",
    "batch_size": "2048",
    "ubatch_size": "512",
    "threads": "-1",
    "cache_type_k": "f16",
    "cache_type_v": "f16",
})

#: Options whose value must be an integer (``threads`` may be -1: "choose automatically").
INTEGER_OPTIONS = frozenset({"ctx_size", "batch_size", "ubatch_size", "threads"})

#: Device-selection tokens: the option of the same name, else this default.
DEVICE_TOKEN_DEFAULTS: Mapping[str, str] = MappingProxyType({
    "hip_visible_devices": "0",
    "cuda_visible_devices": "0",
    "rocr_visible_devices": "0",
    "ggml_vk_visible_devices": "0",
    "ze_affinity_mask": "0",
})

_PID_LITERAL = "{pid}"


class MissingCheckpointError(LemonpackError):
    """A ``lemond_managed`` model references a local checkpoint that does not exist (section 4.3)."""

    kind = "checkpoint"


class MissingBinaryError(LemonpackError):
    """A variant_of recipe's binary is not installed (section 9: the load fails, naming the install)."""

    kind = "missing-binary"


@dataclass(frozen=True)
class ModelSpec:
    """The model a plan is built for, independent of the model registry.

    ``name`` is the model id (``{model_name}``); ``checkpoints`` maps checkpoint NAME
    (``main``, ``mmproj`` ...) to a local path, absolute or relative to ``model_dir``;
    ``recipe_options`` the model's options (they override the recipe's defaults);
    ``mode`` the deployment mode label (``chat``, ``embeddings`` ...), None to take the
    first declared capability's mode; ``model_dir`` the directory ``{model_dir}`` names
    (None: derived, see the module docstring).
    """

    name: str
    checkpoints: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    recipe_options: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    mode: str | None = None
    model_dir: str | None = None

    @classmethod
    def from_entry(cls, entry: Any) -> "ModelSpec":
        """Build from a registry entry, duck-typed: ``entry.name``, ``entry.checkpoints``
        (a mapping NAME -> path, or one string taken as ``main``), optional
        ``entry.recipe_options``, ``entry.mode`` and ``entry.model_dir``. Raises
        :class:`LemonpackError` when ``name`` is missing or checkpoints have another shape.
        Models reference a recipe plus recipe_options (section 10)."""
        name = getattr(entry, "name", None)
        if not isinstance(name, str) or not name:
            raise LemonpackError(f"model entry {entry!r} has no name")
        raw = getattr(entry, "checkpoints", None) or {}
        if isinstance(raw, (str, os.PathLike)):
            raw = {"main": os.fspath(raw)}
        if not isinstance(raw, Mapping):
            raise LemonpackError(f"model {name!r}: checkpoints must be a mapping NAME -> path, got {raw!r}")
        checkpoints = {str(k): os.fspath(v) for k, v in raw.items()}
        options = getattr(entry, "recipe_options", None) or {}
        model_dir = getattr(entry, "model_dir", None)
        return cls(name=name, checkpoints=MappingProxyType(checkpoints),
                   recipe_options=MappingProxyType(dict(options)), mode=getattr(entry, "mode", None),
                   model_dir=os.fspath(model_dir) if model_dir is not None else None)


@dataclass(frozen=True)
class TokenContext:
    """The load-time snapshot every token of one launch resolves from (section 4.2).

    Runtime: ``port``, ``host``, ``pid`` (None until spawned), ``log_level``, ``recipe``,
    ``model_name``. Checkpoints: ``checkpoints`` NAME -> absolute path, ``model_dir``,
    ``resolved_path``, ``model_relative_path``, ``hf_cache``, ``cache_dir``, ``exe_dir``
    (None: the token fails). Options: ``ctx_size`` ... ``cache_type_v`` as text.
    ``recipe_options`` the merged options (recipe defaults, model, load), ``custom_args``
    a string or a list, ``reserved_args`` what ``{custom_args}`` must not contain, under
    every spelling ``engine_flags`` (the engine's option table, or None) knows.
    ``environ`` the parent environment snapshot and ``env_allowlist`` the ``{env:}``
    allowlist. Hardware: ``host_facts``, ``accelerator`` (selected block key),
    ``gpu_arch`` (selected arch), ``arch_alias_resolver`` (arch -> alias, raising
    :class:`SelectionError` when unmapped).
    """

    recipe: str
    model_name: str
    port: int
    host: str = "127.0.0.1"
    pid: int | None = None
    log_level: str = "info"
    checkpoints: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    model_dir: str | None = None
    resolved_path: str | None = None
    model_relative_path: str | None = None
    hf_cache: str | None = None
    cache_dir: str | None = None
    exe_dir: str | None = None
    ctx_size: str = OPTION_DEFAULTS["ctx_size"]
    batch_size: str = OPTION_DEFAULTS["batch_size"]
    ubatch_size: str = OPTION_DEFAULTS["ubatch_size"]
    threads: str = OPTION_DEFAULTS["threads"]
    cache_type_k: str = OPTION_DEFAULTS["cache_type_k"]
    cache_type_v: str = OPTION_DEFAULTS["cache_type_v"]
    recipe_options: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    custom_args: str | Sequence[str] | None = None
    reserved_args: tuple[str, ...] = ()
    engine_flags: EngineFlagTable | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    env_allowlist: frozenset[str] = DEFAULT_ALLOWLIST
    host_facts: HostFacts | None = None
    accelerator: str | None = None
    gpu_arch: str | None = None
    arch_alias_resolver: Callable[[str | None], str] | None = None


# ---------------------------------------------------------------------------- tokens

def _need(value: str | None, token: Token, why: str) -> str:
    if value is None or value == "":
        raise TokenError(f"token {token.text} cannot be resolved: {why}")
    return value


def _option_text(name: str, value: Any) -> str:
    """A recipe option value as token text: str as is, numbers, booleans ``true``/``false``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise TokenError(f"option {name!r} is a {type(value).__name__}, not a string, number or boolean: {value!r}")


def _relative(path: str, base: str | None, token: Token) -> str:
    base = _need(base, token, "the model has no model_dir")
    if not _inside(path, base):
        raise TokenError(f"token {token.text} cannot be resolved: {path} is not inside model_dir {base}")
    return os.path.relpath(path, base)


def _checkpoint(ctx: TokenContext, token: Token) -> str:
    name = token.name or ""
    if name not in ctx.checkpoints:
        offered = ", ".join(sorted(ctx.checkpoints)) or "none"
        raise TokenError(f"token {token.text} cannot be resolved: model {ctx.model_name!r} has no "
                         f"checkpoint {name!r} (it has: {offered})")
    return ctx.checkpoints[name]


def resolve_token(token: Token | str, ctx: TokenContext) -> str:
    """The value of one token (section 4.2) in the load-time snapshot ``ctx``.

    ``token`` is a parsed :class:`~lemonpack.contract.tokens.Token` or its text
    (``"{custom:gpu_layers:-0}"``). Returns the raw value; the leading-dash rule is
    applied by :func:`lemonpack.contract.tokens.render`, which callers use to render
    whole templates. Raises :class:`TokenError` naming the token when it has no value:
    unknown checkpoint, missing custom option without default, denied or unset env
    variable, host without the arch, unmapped ``{arch_alias}``, ``{pid}`` before spawn,
    ``{custom_args}`` (expand it with :func:`expand_custom_args` instead).
    """
    if isinstance(token, str):
        try:
            parts = parse_template(token)
        except TokenSyntaxError as e:
            raise TokenError(str(e)) from None
        if len(parts) != 1 or not isinstance(parts[0], Token):
            raise TokenError(f"{token!r} is not a single token")
        token = parts[0]
    kind = token.kind
    if kind == "port":
        return str(ctx.port)
    if kind == "host":
        return ctx.host
    if kind == "pid":
        if ctx.pid is None:
            raise TokenError("token {pid} is only valid in stop_command/stop_command_args, "
                             "where it is filled in after spawn")
        return str(ctx.pid)
    if kind == "log_level":
        return ctx.log_level
    if kind == "recipe":
        return ctx.recipe
    if kind == "model_name":
        return ctx.model_name
    if kind == "checkpoint":
        return _checkpoint(ctx, token)
    if kind == "checkpoint_relative":
        return _relative(_checkpoint(ctx, token), ctx.model_dir, token)
    if kind == "resolved_path":
        return _need(ctx.resolved_path, token, f"model {ctx.model_name!r} has no main checkpoint")
    if kind == "model_relative_path":
        if ctx.model_relative_path is not None:
            return ctx.model_relative_path
        path = _need(ctx.resolved_path, token, f"model {ctx.model_name!r} has no main checkpoint")
        return _relative(path, ctx.model_dir, token)
    if kind == "model_dir":
        return _need(ctx.model_dir, token, f"model {ctx.model_name!r} has no model directory")
    if kind == "hf_cache":
        return _need(ctx.hf_cache, token, "no Hugging Face cache (set HF_HOME or HOME)")
    if kind == "cache_dir":
        return _need(ctx.cache_dir, token, "no cache directory")
    if kind == "exe_dir":
        return _need(ctx.exe_dir, token, "no executable directory")
    if kind == "rocm_arch":
        arch = ctx.host_facts.rocm_arch if ctx.host_facts else None
        return _need(arch, token, "the host has no ROCm GPU arch")
    if kind == "cuda_arch":
        arch = ctx.host_facts.cuda_arch if ctx.host_facts else None
        return _need(arch, token, "the host has no CUDA GPU arch")
    if kind == "arch_alias":
        if ctx.arch_alias_resolver is None:
            raise TokenError("token {arch_alias} cannot be resolved: the recipe declares no arch_aliases")
        try:
            return ctx.arch_alias_resolver(ctx.gpu_arch)
        except SelectionError as e:
            raise TokenError(f"token {{arch_alias}} cannot be resolved: {e}") from None
    if kind == "target_device":
        return _need(ctx.accelerator, token, "no accelerator was selected")
    if kind in DEVICE_TOKEN_DEFAULTS:
        value = ctx.recipe_options.get(kind)
        return _option_text(kind, value) if value is not None else DEVICE_TOKEN_DEFAULTS[kind]
    if kind in OPTION_DEFAULTS:
        return getattr(ctx, kind)
    if kind == "custom":
        value = ctx.recipe_options.get(token.name or "")
        if value is None:
            if token.default is not None:
                return token.default
            raise TokenError(f"token {token.text} cannot be resolved: option {token.name!r} is not set "
                             f"and the token has no default (write {{custom:{token.name}:-DEFAULT}})")
        return _option_text(token.name or "", value)
    if kind == "env":
        return resolve_env(token.name or "", token.default, ctx.environ, ctx.env_allowlist)
    if kind == "custom_args":
        raise TokenError("{custom_args} expands to several argv elements; use expand_custom_args")
    raise TokenError(f"unknown token {token.text}")


def split_custom_args(value: str | Sequence[str] | None) -> list[str]:
    """``custom_args`` as argv elements: None -> ``[]``; a list of strings as is; a string
    holding a JSON array of strings -> that array; any other string -> :func:`shlex.split`.
    Raises :class:`TokenError` on unbalanced quotes or non-string elements (section 4.2)."""
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError:
                parsed = None
            if isinstance(parsed, list):
                value = parsed
        if isinstance(value, str):
            try:
                return shlex.split(value)
            except ValueError as e:
                raise TokenError(f"custom_args {value!r} cannot be split: {e}") from None
    items = list(value)
    bad = [v for v in items if not isinstance(v, str)]
    if bad:
        raise TokenError(f"custom_args elements must be strings, got {bad!r}")
    return items


def check_reserved(args: Sequence[str], reserved: Sequence[str], flags: EngineFlagTable | None = None) -> None:
    """Reject a user argument that overrides a reserved flag (section 4.3): an exact match
    or a leading ``<flag>=``; with ``flags`` (the engine's option table,
    :mod:`lemonpack.runtime.engine_flags`) also any other spelling the engine reads as the
    flag (aliases, negations, ``_`` for ``-``) and any option setting what the flag sets.
    Raises :class:`TokenError` naming the argument, the reserved flag and the relation."""
    for arg in args:
        if flags is not None:
            hit = flags.conflict(arg, reserved)
            if hit is not None:
                why = "" if arg.split("=", 1)[0] == hit.reserved else f": {arg.split('=', 1)[0]!r} is {hit.how}"
                raise TokenError(f"custom_args element {arg!r} overrides the reserved flag {hit.reserved!r}{why}")
            continue
        for flag in reserved:
            if arg == flag or arg.startswith(flag + "="):
                raise TokenError(f"custom_args element {arg!r} overrides the reserved flag {flag!r}")


def expand_custom_args(ctx: TokenContext) -> list[str]:
    """``{custom_args}``: :func:`split_custom_args` of ``ctx.custom_args``, each element
    checked against ``ctx.reserved_args`` under ``ctx.engine_flags`` (:func:`check_reserved`).
    Raises :class:`TokenError`."""
    args = split_custom_args(ctx.custom_args)
    check_reserved(args, ctx.reserved_args, ctx.engine_flags)
    return args


# ---------------------------------------------------------------------------- helpers

def default_hf_cache(environ: Mapping[str, str]) -> str | None:
    """The Hugging Face hub cache for ``environ``: ``HF_HUB_CACHE``, ``HUGGINGFACE_HUB_CACHE``,
    ``$HF_HOME/hub``, ``$XDG_CACHE_HOME/huggingface/hub``, ``$HOME/.cache/huggingface/hub``;
    None when none of them is set (the ``{hf_cache}`` token, section 4.2). Raises nothing."""
    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if environ.get(key):
            return environ[key]
    if environ.get("HF_HOME"):
        return str(Path(environ["HF_HOME"]) / "hub")
    if environ.get("XDG_CACHE_HOME"):
        return str(Path(environ["XDG_CACHE_HOME"]) / "huggingface" / "hub")
    if environ.get("HOME"):
        return str(Path(environ["HOME"]) / ".cache" / "huggingface" / "hub")
    return None


def deployment_mode(recipe: Recipe, requested: str | None = None) -> str | None:
    """The model's deployment mode (section 5): ``requested`` (checked against the declared
    capabilities), else the first declared capability that has a mode; None when the recipe
    declares only plumbing. Raises :class:`SelectionError` when ``requested`` is a mode no
    declared capability has."""
    modes = [CAPABILITIES[c].mode for c in recipe.capabilities if c in CAPABILITIES and CAPABILITIES[c].mode]
    if requested is None:
        return modes[0] if modes else None
    if requested not in modes:
        raise SelectionError(f"{recipe.file}: recipe {recipe.recipe!r} cannot deploy a model in mode "
                             f"{requested!r} (its capabilities give: {', '.join(dict.fromkeys(modes)) or 'none'})")
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


def _merged_options(recipe: Recipe, model: ModelSpec, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Options by precedence: custom_options ``default_value``s, the recipe's (and its
    bases') ``recipe_options``, the model's, then the load's ``options``."""
    merged = {o["name"]: o["default_value"] for o in recipe.custom_options if "name" in o and "default_value" in o}
    merged.update(recipe.recipe_options)
    merged.update(model.recipe_options)
    merged.update(options or {})
    return merged


def _option(merged: Mapping[str, Any], name: str) -> str:
    value = merged.get(name)
    if value is None:
        return OPTION_DEFAULTS[name]
    if isinstance(value, bool):
        raise TokenError(f"option {name!r} must be a number or string, not a boolean")
    text = _option_text(name, value)
    if name in INTEGER_OPTIONS and not re.fullmatch(r"-?\d+", text):
        raise TokenError(f"option {name!r} must be an integer, got {text!r}")
    return text


def _abs_checkpoints(model: ModelSpec, model_dir: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, path in model.checkpoints.items():
        if not os.path.isabs(path):
            if ":" in path:
                raise LemonpackError(f"model {model.name!r}: checkpoint {name!r} is the hub reference {path!r}; "
                                     "lemonpack does not download model weights (RFC section 8): download the file "
                                     "and register its local path (lemonpack models add ... --replace)")
            if model_dir is None:
                raise LemonpackError(f"model {model.name!r}: checkpoint {name!r} path {path!r} is relative "
                                     "and the model has no model_dir")
            path = os.path.join(model_dir, path)
        out[name] = os.path.normpath(path)
    return out


def _main_checkpoint(checkpoints: Mapping[str, str]) -> str | None:
    if "main" in checkpoints:
        return checkpoints["main"]
    if len(checkpoints) == 1:
        return next(iter(checkpoints.values()))
    return None


def _inside(path: str, base: str) -> bool:
    try:
        return os.path.commonpath([path, base]) == os.path.normpath(base)
    except ValueError:
        return False


def _derive_model_dir(model: ModelSpec, hf_cache: str | None) -> str | None:
    if model.model_dir is not None:
        return os.path.normpath(model.model_dir)
    main = _main_checkpoint(model.checkpoints)
    if main is None or not os.path.isabs(main):
        return hf_cache
    if hf_cache and _inside(main, hf_cache):
        return hf_cache
    return os.path.dirname(os.path.normpath(main))


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
    installed; :class:`~lemonpack.runtime.launchplans.UnsupportedBuiltinError` for a
    variant_of with no launch plan.
    """
    env_snapshot = dict(os.environ if environ is None else environ)
    merged = _merged_options(recipe, model, options)
    eff = select_block(recipe, host, device or merged.get("device"))
    chosen_mode = deployment_mode(recipe, mode or model.mode)

    cache = Path(cache_root) if cache_root is not None else paths.cache_root()
    if external_dir is not None:
        external = Path(external_dir)
    else:
        external = cache / "external" / recipe.recipe if cache_root is not None else paths.external_dir(recipe.recipe)
    hf_cache = default_hf_cache(env_snapshot)
    model_dir = _derive_model_dir(model, hf_cache)
    checkpoints = _abs_checkpoints(model, model_dir)
    resolved = _main_checkpoint(checkpoints)

    ctx = TokenContext(
        recipe=recipe.recipe, model_name=model.name, port=port, host=host_addr,
        log_level=_option_text("log_level", merged.get("log_level", "info")),
        checkpoints=MappingProxyType(checkpoints), model_dir=model_dir, resolved_path=resolved,
        hf_cache=hf_cache, cache_dir=str(cache), exe_dir=_exe_dir(recipe, eff, external),
        **{name: _option(merged, name) for name in OPTION_DEFAULTS},
        recipe_options=MappingProxyType(merged), custom_args=merged.get("custom_args"),
        reserved_args=eff.reserved_args, environ=MappingProxyType(env_snapshot),
        host_facts=host, accelerator=eff.accelerator, gpu_arch=eff.gpu_arch,
        arch_alias_resolver=partial(arch_alias, recipe) if recipe.arch_aliases else None,
    )
    rec = _Recorder(ctx)
    expand = partial(expand_custom_args, ctx)
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
        expand = partial(expand_custom_args, ctx)
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
        expand = partial(expand_custom_args, ctx)
        if not eff.binary:
            raise SelectionError(f"{recipe.file}: {eff.path} has no binary")
        executable = str(external / eff.binary)
        if check_files:
            _check_binary(install_ref or recipe.recipe, executable)
            _check_installed_pin(install_ref or recipe.recipe, external, eff)
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
        _check_checkpoints(model.name, {n: checkpoints[n] for n in rec.checkpoints if n in checkpoints})

    argv, stop = _valid_names(argv, stop)
    runtime, name = container_of(argv)
    return LaunchPlan(
        recipe=recipe.recipe, model=model.name, executable=argv[0], argv=tuple(argv),
        env=MappingProxyType(env), working_dir=working_dir, host=host_addr, port=port,
        health_probe=health, stop_argv_template=stop, container_name=name, container_runtime=runtime,
        platform_path=eff.path, accelerator=eff.accelerator, gpu_arch=eff.gpu_arch, mode=chosen_mode,
    )


def _enable_templates(recipe: Recipe, mode: str | None) -> tuple[str, ...]:
    if mode is None:
        return ()
    out: list[str] = []
    for cap in capabilities_for_mode(recipe.capabilities, mode):
        out.extend(recipe.capability_enable_args.get(cap, ()))
    return tuple(out)


def _check_binary(ref: str, path: str) -> None:
    install = f"lemonpack install {shlex.quote(ref)}"
    if not os.path.isfile(path):
        raise MissingBinaryError(f"variant_of binary {path} is not installed; run `{install}`")
    if not os.access(path, os.X_OK):
        raise MissingBinaryError(f"variant_of binary {path} is not executable; reinstall it with `{install}`")


def _check_installed_pin(ref: str, external: Path, eff) -> None:
    """Refuse an installed artifact whose recorded sha256 is not the one the recipe pins
    now (the recipe changed after ``lemonpack install``). A binary without an install
    record is user-provided (RFC section 7) and is not checked."""
    record = external.parent / f"{external.name}.install.json"
    prov = eff.provenance
    if prov.policy != "pinned" or not prov.sha256 or not record.is_file():
        return
    try:
        installed = json.loads(record.read_text()).get("sha256", "")
    except (OSError, ValueError):
        return
    if installed.removeprefix("sha256:") != prov.sha256:
        raise MissingBinaryError(
            f"the installed artifact of {eff.recipe.recipe} ({external}) has {installed}, but {eff.path} now pins "
            f"sha256:{prov.sha256}; run `lemonpack install {shlex.quote(ref)}`")


def _check_checkpoints(model: str, referenced: Mapping[str, str]) -> None:
    for name, path in referenced.items():
        if not os.path.exists(path):
            raise MissingCheckpointError(
                f"model {model!r}: checkpoint {name!r} ({path}) does not exist; pull the model first "
                "(or set model_management: self_managed if the engine manages its own weights)")


__all__ = ["DEVICE_TOKEN_DEFAULTS", "MissingBinaryError", "MissingCheckpointError",
           "ModelSpec", "OPTION_DEFAULTS", "TokenContext", "build_launch_plan", "check_reserved",
           "container_of", "default_hf_cache", "deployment_mode", "expand_custom_args", "resolve_token",
           "split_custom_args"]
