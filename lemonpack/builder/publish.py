"""What ``lemonpack publish SOURCE --to HOST/REPO[:TAG]`` pushes: :func:`publish_source`.

SOURCE is an OCI image layout (``DIR`` or ``DIR:TAG``), or a recipe file that is built first
with the plan every build shares (:func:`lemonpack.builder.plan.plan_build`: same defaults
as ``lemonpack build``). A built recipe's layout holds one image index tagged ``<recipe>``
over one manifest per target (platform block × arch override: its ``platform`` and the
``dev.lemonpack.*`` annotations tell them apart; image-spec ``image-index.md``), plus one tag
``<recipe>.<target>`` per manifest (``lemonpack.builder.pipeline``). So:

- ``--to HOST/REPO:TAG``: the recipe's index goes under TAG, with every manifest it names,
  which is what a user of OCI expects of a multi-platform name (``docker pull``, ``skopeo
  copy``, podman pick their platform from it); a single-target recipe is an index of one.
- ``--to HOST/REPO``: every tag of the layout under its own name (``<recipe>`` and each
  ``<recipe>.<target>``), as for a layout.

The registry room pushes (:func:`lemonpack.registry.transfer.publish_layout`); this module
decides what, and builds. It imports no registry code: opening a registry ``--base`` is
passed in (``open_base``), as for ``lemonpack build``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lemonpack.errors import LayoutError, UsageError
from lemonpack.oci.layout_reader import split_layout_arg

if TYPE_CHECKING:  # the builder is imported when SOURCE is a recipe: a layout's publish needs none of it
    from lemonpack.builder.pipeline import BuildResult
    from lemonpack.builder.plan import BuildPlan
    from lemonpack.contract.model import Recipe
    from lemonpack.oci.base import BaseSource


@dataclass(frozen=True)
class PublishSource:
    """What to push: ``layout`` (an OCI image layout directory), ``tag`` (the one layout tag
    to push, None: every tag), ``built`` (the build result when SOURCE was a recipe, else
    None: its ``indexes`` are ``{recipe: index digest}``) and ``plan`` (the build's plan, for
    ``publish --attest``: :mod:`lemonpack.builder.attest`; None for a layout)."""

    layout: Path
    tag: str | None
    built: BuildResult | None = None
    plan: BuildPlan | None = None


def is_recipe_source(source: str) -> bool:
    """Whether SOURCE names a recipe file (an existing ``*.json`` file) rather than a layout."""
    return source.endswith(".json") and Path(source).is_file()


def publish_source(source: str, workdir: Path, *, dest_tag: str | None, base: str | None = None,
                   mirror: str | None = None, progress: bool | None = None,
                   known: Callable[[], Mapping[str, Recipe]] | None = None,
                   open_base: Callable[[str, contextlib.ExitStack], BaseSource] | None = None) -> PublishSource:
    """Resolve SOURCE (module docstring) into what to push to a destination whose tag is
    ``dest_tag`` (None: no tag given). A recipe is built into ``workdir/layout`` (``workdir``:
    a directory the caller removes afterwards) with ``base``, ``mirror``, ``progress``,
    ``known`` (the discovered recipes, for ``extends``) and ``open_base`` (opens ``--base``;
    default: local ``oci:`` layouts only) as ``lemonpack build`` takes them.

    Raises :class:`UsageError` (exit 2) for ``base`` with a layout (a layout is pushed as it
    is), :class:`LayoutError` when SOURCE is neither a recipe file nor an OCI image
    layout, and what :func:`plan_build` / :func:`write_build` raise.
    """
    if is_recipe_source(source):
        from lemonpack.builder.plan import plan_build, write_build

        plan = plan_build([Path(source)], out=Path(workdir) / "layout", mirror=mirror, base=base, known=known)
        built = (write_build(plan, progress=progress) if open_base is None
                 else write_build(plan, progress=progress, open_base=open_base))
        index_tag = plan.recipes[0].recipe
        return PublishSource(plan.out, index_tag if dest_tag is not None else None, built, plan)
    if base is not None:
        raise UsageError("--base applies when publishing a RECIPE.json (a layout is pushed as it is)")
    layout, tag = split_layout_arg(source)
    if not (Path(layout) / "oci-layout").is_file():
        raise LayoutError(f"{layout}: not an OCI image layout (no oci-layout file) and not a recipe file")
    return PublishSource(Path(layout), tag)


__all__ = ["PublishSource", "is_recipe_source", "publish_source"]
