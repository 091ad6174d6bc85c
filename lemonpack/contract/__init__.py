"""The recipe contract, major 1 (Lemonade RFC "External Backend Manifests").

Public surface: :func:`load_recipe` / :func:`load_recipe_text` (strict validation into a
frozen :class:`Recipe`), :func:`lint_file` (every problem of a file), the host model
:class:`HostFacts` with :func:`detect_host`, and selection (:func:`select_block`,
:func:`targets`, :func:`arch_alias`). Tokens live in :mod:`lemonpack.contract.tokens`.
"""

from __future__ import annotations

from pathlib import Path

from lemonpack.contract.host import HostFacts, detect_host
from lemonpack.contract.loader import check_text, load_recipe, load_recipe_text
from lemonpack.contract.model import ArchOverride, HealthProbe, PlatformBlock, Provenance, Recipe
from lemonpack.contract.select import EffectiveBlock, arch_alias, select_accelerator, select_block, targets
from lemonpack.errors import Problem
from lemonpack.files import open_regular


def lint_file(path: str | Path) -> list[Problem]:
    """Every contract problem of the recipe file at ``path`` (empty list: it passes)."""
    file = str(path)
    try:
        with open_regular(path, follow_symlinks=True) as f:
            text = f.read().decode("utf-8")
    except OSError as e:
        return [Problem(file, "", "unreadable", f"cannot read file: {e.strerror or e}")]
    except UnicodeDecodeError as e:
        return [Problem(file, "", "unreadable", f"cannot read file: {e}")]
    return check_text(text, file)[1]


__all__ = [
    "ArchOverride", "EffectiveBlock", "HealthProbe", "HostFacts", "PlatformBlock", "Problem", "Provenance",
    "Recipe", "arch_alias", "check_text", "detect_host", "lint_file", "load_recipe",
    "load_recipe_text", "select_accelerator", "select_block", "targets",
]
