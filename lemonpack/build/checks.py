"""Build policy checks beyond the contract: enforced digest pinning.

The RFC (sections 8, 13.2, 19) leaves container digest pinning to convention; lemonpack
enforces it. Every container image in a ``podman``/``docker`` ``run`` argv must be
``name@sha256:<64 hex>``: a mutable tag, a token in the reference, or a malformed digest
is a :class:`~lemonpack.errors.Problem` naming the field and the argument.
"""

from __future__ import annotations

from pathlib import Path

from lemonpack.contract import Recipe, load_recipe
from lemonpack.errors import ManifestError, Problem
from lemonpack.oci.reference import check_pinned, find_run_images


def recipe_pinning_problems(recipe: Recipe) -> list[Problem]:
    """Pinning problems of every platform block and every arch override that sets
    ``command`` or ``args`` (the override's argv is checked with the effective command)."""
    problems: list[Problem] = []
    for blocks in recipe.platforms.values():
        for block in blocks.values():
            levels = [(block.path, block.command, block.args)]
            for o in block.arch:
                if o.command is not None or o.args is not None:
                    levels.append((f"{block.path}.arch.{o.pattern}", o.command or block.command,
                                   o.args if o.args is not None else block.args))
            for path, command, args in levels:
                if not command or args is None:
                    continue
                for index, image in find_run_images(command, args):
                    why = check_pinned(image)
                    if why:
                        problems.append(Problem(recipe.file, f"{path}.args[{index}]", "digest-pinning",
                                                f"container image not pinned by digest: {why}"))
    return problems


def pinning_problems(path: str | Path) -> list[Problem]:
    """Pinning problems of the recipe file at ``path`` (contract problems if it fails to load)."""
    try:
        return recipe_pinning_problems(load_recipe(path))
    except ManifestError as e:
        return list(e.problems)


def require_pinned(recipe: Recipe) -> None:
    """Raise :class:`ManifestError` listing every unpinned image of ``recipe``."""
    problems = recipe_pinning_problems(recipe)
    if problems:
        raise ManifestError(problems)
