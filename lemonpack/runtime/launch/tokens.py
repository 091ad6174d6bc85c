"""Token values at launch (RFC section 4.2): the load-time snapshot (:class:`TokenContext`) and
the value of each token in it (:func:`resolve_token`), with the option defaults and the checks
of load-time options.

Pure: nothing is spawned, nothing read from disk or the environment (the parent environment
arrives as a snapshot). The vocabulary and the template syntax are the contract's
(:mod:`lemonpack.contract.tokens`); this module gives each token its value on this launch.

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
- env: ``{env:NAME}`` / ``{env:NAME:-DEFAULT}`` through :mod:`lemonpack.runtime.launch.envallow`.

Every token value that begins with ``-`` is rejected unless it is a validated negative
number; that rule lives in :func:`lemonpack.contract.tokens.render` and is reused here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lemonpack.contract.host import HostFacts
from lemonpack.contract.model import EMPTY
from lemonpack.contract.tokens import Token, TokenSyntaxError, parse_template
from lemonpack.errors import SelectionError, TokenError
from lemonpack.runtime.launch.customargs import split_custom_args
from lemonpack.runtime.launch.engine_flags import EngineFlagTable
from lemonpack.runtime.launch.envallow import DEFAULT_ALLOWLIST, resolve_env
from lemonpack.safetree import inside

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


def _need(value: str | None, token: Token, why: str) -> str:
    if value is None or value == "":
        raise TokenError(f"token {token.text} cannot be resolved: {why}")
    return value


def option_text(name: str, value: Any) -> str:
    """A recipe option value as token text: str as is, numbers, booleans ``true``/``false``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise TokenError(f"option {name!r} is a {type(value).__name__}, not a string, number or boolean: {value!r}")


def _relative(path: str, base: str | None, token: Token) -> str:
    base = _need(base, token, "the model has no model_dir")
    if not inside(path, base):
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
    ``{custom_args}`` (expand it with :func:`lemonpack.runtime.launch.customargs.expand_custom_args` instead).
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
        return option_text(kind, value) if value is not None else DEVICE_TOKEN_DEFAULTS[kind]
    if kind in OPTION_DEFAULTS:
        return getattr(ctx, kind)
    if kind == "custom":
        value = ctx.recipe_options.get(token.name or "")
        if value is None:
            if token.default is not None:
                return token.default
            raise TokenError(f"token {token.text} cannot be resolved: option {token.name!r} is not set "
                             f"and the token has no default (write {{custom:{token.name}:-DEFAULT}})")
        return option_text(token.name or "", value)
    if kind == "env":
        return resolve_env(token.name or "", token.default, ctx.environ, ctx.env_allowlist)
    if kind == "custom_args":
        raise TokenError("{custom_args} expands to several argv elements; use expand_custom_args")
    raise TokenError(f"unknown token {token.text}")


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


def option_value(merged: Mapping[str, Any], name: str) -> str:
    value = merged.get(name)
    if value is None:
        return OPTION_DEFAULTS[name]
    if isinstance(value, bool):
        raise TokenError(f"option {name!r} must be a number or string, not a boolean")
    text = option_text(name, value)
    if name in INTEGER_OPTIONS and not re.fullmatch(r"-?\d+", text):
        raise TokenError(f"option {name!r} must be an integer, got {text!r}")
    return text


#: Integer options that cannot be negative (llama.cpp reads a negative ``threads`` as "all
#: cores", a negative size as nothing meaningful).
NON_NEGATIVE_OPTIONS = frozenset({"ctx_size", "batch_size", "ubatch_size"})


def check_load_options(options: Mapping[str, Any]) -> None:
    """Check the options of a load request (``POST /v1/load``) before anything is stopped or
    started: each known option by the rule the launch plan applies (integers for
    :data:`INTEGER_OPTIONS`, not negative for :data:`NON_NEGATIVE_OPTIONS`), ``custom_args``
    split as the plan splits it. Raises :class:`TokenError` naming the option."""
    for name, value in options.items():
        if name == "custom_args":
            split_custom_args(value)
            continue
        if name in OPTION_DEFAULTS:
            text = option_value({name: value}, name)
            if name in NON_NEGATIVE_OPTIONS and text.startswith("-"):
                raise TokenError(f"option {name!r} must not be negative, got {text!r}")
        else:
            option_text(name, value)


__all__ = ["DEVICE_TOKEN_DEFAULTS", "INTEGER_OPTIONS", "NON_NEGATIVE_OPTIONS", "OPTION_DEFAULTS", "TokenContext",
           "check_load_options", "default_hf_cache", "option_text", "option_value", "resolve_token"]
