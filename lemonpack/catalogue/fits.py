""""Runs on this host" and the install command for it: an index entry against
:class:`~lemonpack.contract.host.HostFacts`, decided by the selection ``install`` and ``run`` use.

The entry's platforms (from the index) become platform blocks of a skeleton
:class:`~lemonpack.contract.model.Recipe` whose artifacts sit where the real recipe's do (a
base artifact when the platform runs on every arch, ``any_arch``; one per arch pattern
otherwise). Then, as on the host: the accelerator is :func:`lemonpack.contract.select.select_accelerator`'s
choice (what ``run`` launches), the host must have it
(:func:`~lemonpack.contract.select.lacking_accelerator_warning`), and
:func:`lemonpack.builder.install.plan_install` (``install``'s own selection, arch overrides
through :func:`~lemonpack.contract.select.block_for_arch`) must find an artifact for the
host's GPU arch; when the platform lists the CPUs of its per-CPU artifacts (``cpu_archs``) the
host's CPU must be one of them. The install arguments name ``--accelerator`` when the OS has more than one
block (``install`` refuses to guess there) and ``--arch`` when the artifact chosen is an
arch override.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from shlex import quote
from typing import Any

from lemonpack.contract.cpuartifacts import cpu_unfit
from lemonpack.contract.host import HostFacts
from lemonpack.contract.model import ArchOverride, PlatformBlock, Recipe
from lemonpack.contract.select import lacking_accelerator_warning, select_accelerator
from lemonpack.errors import ConfigError, LemonpackError, SelectionError

#: The artifact the skeleton recipe's blocks carry (never fetched: only its presence counts).
_ARTIFACT = "catalogue:artifact"


@dataclass(frozen=True)
class HostFit:
    """``fits``: the entry runs on the host; ``reason``: ``linux/rocm gfx1151`` (what runs)
    or why not; ``platform``: ``(os, accelerator)`` selected, or None; ``install_args``: the
    arguments ``lemonpack install`` needs there (``["--accelerator", "cuda"]``)."""

    fits: bool
    reason: str
    platform: tuple[str, str] | None = None
    install_args: tuple[str, ...] = ()


def _skeleton(entry: Mapping[str, Any]) -> Recipe:
    blocks: dict[str, dict[str, PlatformBlock]] = {}
    for p in entry.get("platforms") or []:
        archs = list(p.get("archs") or [])
        patterns = list(p.get("arch_patterns") or archs)
        any_arch = bool(p.get("any_arch", not archs))
        blocks.setdefault(p["os"], {})[p["accelerator"]] = PlatformBlock(
            os=p["os"], accelerator=p["accelerator"], source=_ARTIFACT if any_arch else None,
            arch=tuple(ArchOverride(pattern=a, source=_ARTIFACT) for a in patterns))
    return Recipe(file=entry.get("id", "<entry>"), recipe=entry.get("name", ""), display_name="",
                  api_contract_version="1", capabilities=(), platforms=blocks, document={}, canonical=b"",
                  variant_of="catalogue-entry", default_accelerator=entry.get("default_accelerator"))


def host_fit(entry: Mapping[str, Any], host: HostFacts, budget: int | None = None) -> HostFit:
    """Whether ``entry`` runs on ``host``, what runs there and the install arguments
    (:class:`HostFit`; the module docstring has the rule). A model entry fits when its memory
    estimate is within ``budget`` bytes (None: this host's,
    :func:`lemonpack.catalogue.models.model_fit`). Raises nothing."""
    from lemonpack.builder.install import plan_install

    if entry.get("kind") == "model":
        from lemonpack.catalogue.models import host_budget, model_fit

        return model_fit(entry, host_budget() if budget is None else budget)

    recipe = _skeleton(entry)
    try:
        accel = select_accelerator(recipe, host)
    except SelectionError:
        offered = sorted({p["os"] for p in entry.get("platforms") or []})
        return HostFit(False, f"no platform for {host.os} (offers: {', '.join(offered) or 'none'})")
    if lacking_accelerator_warning(recipe, host, accel) is not None:
        offered = sorted(a for a in recipe.platforms[host.os])
        return HostFit(False, f"needs {' or '.join(offered)} on {host.os}; the host has "
                              f"{', '.join(sorted(host.accelerators))}")
    plat = next(p for p in entry["platforms"] if p["os"] == host.os and p["accelerator"] == accel)
    if (why := cpu_unfit(plat.get("cpu_archs"), host.cpu)) is not None:
        return HostFit(False, f"{host.os}/{accel}: {why}")
    several = len(recipe.platforms[host.os]) > 1
    arch = host.gpu_arch(accel)
    try:
        plan = plan_install(recipe, host, accelerator=accel if several else None)
    except SelectionError:  # artifacts per arch only, none for this one
        archs = plat.get("archs") or plat.get("arch_patterns") or []
        return HostFit(False, f"{host.os}/{accel} is built for {', '.join(archs)}; the host's GPU is {arch or 'unknown'}")
    args: list[str] = ["--accelerator", accel] if several else []
    if plan.block.arch_pattern is not None and arch:
        args += ["--arch", arch]
    shown = arch if arch and (arch in (plat.get("archs") or []) or plan.block.arch_pattern) else None
    return HostFit(True, f"{host.os}/{accel}" + (f" {shown}" if shown else ""), (host.os, accel), tuple(args))


def fits_host(entry: Mapping[str, Any], host: HostFacts) -> tuple[bool, str]:
    """``(True, "linux/rocm gfx1151")`` when ``entry`` runs on ``host``, else ``(False,
    reason)``: :func:`host_fit` as a pair. Raises nothing."""
    f = host_fit(entry, host)
    return f.fits, f.reason


def install_command(entry: Mapping[str, Any], fit: HostFit) -> str | None:
    """The entry's shown install command for a host it fits: the index's ``install`` command
    plus :attr:`HostFit.install_args` (each shell-quoted) when it is a ``lemonpack install``;
    None when the entry has no install command."""
    cmd = (entry.get("commands") or {}).get("install")
    if not cmd:
        return None
    if fit.fits and fit.install_args and cmd.startswith("lemonpack install ") and "--example" not in cmd:
        cmd += "".join(" " + quote(a) for a in fit.install_args)
    return cmd


def platform_installs(entry: Mapping[str, Any]) -> dict[str, str]:
    """Per platform (``"linux/cuda"``) the install command for a host of that OS having that
    accelerator and, when the platform lists archs, its first arch: what entry pages show
    beside the generic command. Empty when the entry has no ``lemonpack install`` command or
    no OS with more than one platform and no arch-specific platform."""
    out: dict[str, str] = {}
    for p in entry.get("platforms") or []:
        archs = p.get("archs") or []
        arch = archs[0] if archs else None
        is_cuda = arch is not None and (p["accelerator"] == "cuda" or arch.startswith("sm_"))
        rocm, cuda = (None, arch) if is_cuda else (arch, None)
        host = HostFacts(p["os"], frozenset({"cpu", p["accelerator"]}), rocm_arch=rocm, cuda_arch=cuda)
        fit = host_fit(dict(entry, default_accelerator=p["accelerator"]), host)
        cmd = install_command(entry, fit)
        if fit.fits and fit.install_args and cmd:
            out[f"{p['os']}/{p['accelerator']}"] = cmd
    return out


def search_host(host_facts: str | os.PathLike[str] | None = None) -> HostFacts:
    """The host ``catalogue search --fits-host`` matches entries against: the host facts file
    ``host_facts`` (``lemonpack host --json``'s shape), else this machine
    (:func:`lemonpack.contract.host.detect_host`, which honours ``LEMONPACK_HOST_FACTS``).
    Raises :class:`~lemonpack.errors.ConfigError` naming the file when it is not host facts,
    what :func:`lemonpack.files.read_user_file` raises when it cannot be read."""
    from lemonpack.contract.host import detect_host
    from lemonpack.files import read_user_file

    if host_facts is None:
        return detect_host()
    data = read_user_file(host_facts, "host facts file")
    try:
        return HostFacts.from_json(json.loads(data.decode("utf-8")))
    except (ValueError, LemonpackError) as e:  # not JSON (UTF-8), or not host facts' shape
        raise ConfigError(f"cannot read host facts {host_facts}: {e}") from None
