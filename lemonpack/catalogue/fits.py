""""Runs on this host": an index entry against :class:`~lemonpack.contract.host.HostFacts`.

The entry's platforms (from the index) become platform blocks of a skeleton
:class:`~lemonpack.contract.model.Recipe`, and the contract's own selection decides
(:func:`lemonpack.contract.select.select_accelerator`, as ``run`` / ``install`` do): a block
for the host OS must exist, the accelerator chosen must be one the host has, and when the
block lists concrete GPU archs the host's arch (:meth:`HostFacts.gpu_arch`) must be one of them, and
when it lists the CPUs of its per-CPU artifacts (``cpu_archs``) the host's CPU must be one of them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from lemonpack.contract.cpuartifacts import cpu_unfit
from lemonpack.contract.host import HostFacts
from lemonpack.contract.model import ArchOverride, PlatformBlock, Recipe
from lemonpack.contract.select import lacking_accelerator_warning, select_accelerator
from lemonpack.errors import ConfigError, LemonpackError, SelectionError


def _skeleton(entry: Mapping[str, Any]) -> Recipe:
    blocks: dict[str, dict[str, PlatformBlock]] = {}
    for p in entry.get("platforms") or []:
        blocks.setdefault(p["os"], {})[p["accelerator"]] = PlatformBlock(
            os=p["os"], accelerator=p["accelerator"],
            arch=tuple(ArchOverride(pattern=a) for a in p.get("arch_patterns") or []))
    return Recipe(file=entry.get("id", "<entry>"), recipe=entry.get("name", ""), display_name="",
                  api_contract_version="1", capabilities=(), platforms=blocks, document={}, canonical=b"",
                  default_accelerator=entry.get("default_accelerator"))


def fits_host(entry: Mapping[str, Any], host: HostFacts) -> tuple[bool, str]:
    """``(True, "linux/rocm gfx1151")`` when ``entry`` runs on ``host``, else ``(False,
    reason)`` (no block for the OS; the block selected is for an accelerator the host lacks;
    the host's GPU arch is not among the block's archs). Raises nothing."""
    recipe = _skeleton(entry)
    try:
        accel = select_accelerator(recipe, host)
    except SelectionError:
        offered = sorted({p["os"] for p in entry.get("platforms") or []})
        return False, f"no platform for {host.os} (offers: {', '.join(offered) or 'none'})"
    if lacking_accelerator_warning(recipe, host, accel) is not None:
        offered = sorted(a for a in recipe.platforms[host.os])
        return False, (f"needs {' or '.join(offered)} on {host.os}; the host has "
                       f"{', '.join(sorted(host.accelerators))}")
    plat = next(p for p in entry["platforms"] if p["os"] == host.os and p["accelerator"] == accel)
    if (why := cpu_unfit(plat.get("cpu_archs"), host.cpu)) is not None:
        return False, f"{host.os}/{accel}: {why}"
    arch = host.gpu_arch(accel)
    if plat.get("archs"):
        if arch not in plat["archs"]:
            return False, f"{host.os}/{accel} is built for {', '.join(plat['archs'])}; the host's GPU is {arch or 'unknown'}"
        return True, f"{host.os}/{accel} {arch}"
    return True, f"{host.os}/{accel}"


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
