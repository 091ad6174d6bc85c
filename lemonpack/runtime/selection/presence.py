"""Presence facts for the backend selector (seed 001): whether each candidate recipe's binary,
image or command is on this machine. The I/O kept apart from the pure decision
(:func:`lemonpack.runtime.selection.selector.select_backend` takes these facts as input)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from lemonpack.contract.host import HostFacts
from lemonpack.contract.model import Recipe
from lemonpack.contract.select import EffectiveBlock
from lemonpack.runtime.engines.containers import CLILike
from lemonpack.runtime.selection.selector import Presence, host_block


def image_present(cli: CLILike, image: str) -> bool:
    """True when the container CLI ``cli`` (a name, an argv prefix with global options, or a
    :class:`~lemonpack.runtime.engines.containers.ContainerCLI` carrying the plan's env: the store the
    recipe's own command line selects) has ``image`` locally: ``podman image exists IMAGE``
    (podman-image-exists(1)), else ``CLI image inspect IMAGE``."""
    from lemonpack.runtime.engines.containers import ContainerCLI

    cli = ContainerCLI.of(cli)
    args = ("image", "exists", image) if cli.name in ("podman", "podman-remote") else ("image", "inspect", image)
    try:
        return cli.run(*args, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def presence_of(recipe: Recipe, eff: EffectiveBlock, external: Path, *,
                image_check: Callable[[CLILike, str], bool] = image_present) -> Presence:
    """Look whether ``recipe``'s artifact for block ``eff`` is present: the ``variant_of``
    binary ``external/<binary>`` (executable); for a passthrough ``run`` of a container CLI,
    the image (``image_check(cli, image)``, ``cli`` the argv's program with its global
    options and the block's env: the store the recipe uses); else the command (an absolute executable
    file, or a name on ``PATH``). A command or image with tokens is not resolvable before
    a load and counts as present, saying so."""
    from lemonpack.oci.cmdline import UnreadableCommandLine, read_container_argv

    if recipe.variant_of is not None:
        if not eff.binary:
            return Presence(False, f"{eff.path} binary (none declared)")
        path = external / eff.binary
        return Presence(path.is_file() and os.access(path, os.X_OK), f"binary {path}")
    command = eff.command or ""
    try:
        inv = read_container_argv([command, *eff.args])
    except UnreadableCommandLine:
        inv = None
    if inv is not None and inv.subcommand == "run" and inv.image:
        if "{" in inv.image:
            return Presence(True, f"image {inv.image} (has tokens, not checked)")
        from lemonpack.runtime.engines.containers import ContainerCLI

        cli = ContainerCLI(inv.cli_prefix([command, *eff.args]), tuple(sorted(dict(eff.env or {}).items())))
        return Presence(image_check(cli, inv.image), f"image {inv.image}")
    if not command or "{" in command:
        return Presence(True, f"command {command or '(none)'} (has tokens, not checked)")
    if os.path.isabs(command):
        return Presence(os.path.isfile(command) and os.access(command, os.X_OK), f"command {command}")
    found = shutil.which(command)
    return Presence(found is not None, f"command {command}" + (f" ({found})" if found else " on PATH"))


def gather_presence(recipes: Iterable[Recipe], host: HostFacts, *, external_dir: Callable[[str], Path] | None = None,
                    image_check: Callable[[CLILike, str], bool] = image_present) -> dict[str, Presence]:
    """Presence facts for every recipe that has a block for ``host`` (:func:`host_block`):
    recipe id -> :class:`Presence`. ``external_dir(recipe_id)`` is where a variant_of binary
    is installed (default ``paths.cache_root()/external/<id>``, as the launch plan looks)."""
    from lemonpack import paths

    ext = external_dir or (lambda rid: paths.cache_root() / "external" / rid)
    out: dict[str, Presence] = {}
    for r in recipes:
        eff = host_block(r, host)
        if not isinstance(eff, str):
            out[r.recipe] = presence_of(r, eff, Path(ext(r.recipe)), image_check=image_check)
    return out


__all__ = ["gather_presence", "image_present", "presence_of"]
