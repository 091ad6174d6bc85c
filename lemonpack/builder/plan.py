"""What a build will do, decided before anything is fetched or written: :func:`plan_build`.

``lemonpack build``, ``lemonpack publish RECIPE.json`` and the catalogue's rebuild check all
build through here, so they share one set of defaults (no copies): every platform block and
arch override of each recipe, the host's CPU architecture in OCI names
(:func:`lemonpack.oci.platform.host_arch`), ``gzip`` layers, the mirror from ``--mirror`` else
``$LEMONPACK_MIRROR`` (:meth:`lemonpack.fetch.Mirror.from_env`), timestamps from
``SOURCE_DATE_EPOCH`` (default 0), ``extends`` bases not given looked up among the discovered
recipes (``known``). The plan is a frozen value (``--dry-run`` prints it, :meth:`BuildPlan.to_json`);
:func:`write_build` carries it out with :func:`lemonpack.builder.pipeline.build_recipes`.

Bad input is refused here, before any download: an option value outside its choices, a
mirror that is no http(s) URL, ``--example`` with recipes or a mirror, ``--arch`` matching no
arch override of the chosen blocks (each a :class:`~lemonpack.errors.UsageError`, exit 2);
invalid recipe files (one :class:`~lemonpack.errors.ManifestError` listing every problem of
every file, exit 1).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lemonpack.builder.pipeline import BuildOptions, BuildResult, TargetResult, build_recipes
from lemonpack.contract import load_recipe, targets
from lemonpack.contract.builtins import ACCELERATORS, OS_NAMES
from lemonpack.contract.model import Recipe
from lemonpack.errors import ManifestError, Problem, SelectionError, UsageError
from lemonpack.fetch import ArtifactCache, Mirror
from lemonpack.oci.base import BaseSource
from lemonpack.oci.platform import OCI_ARCHITECTURES, host_arch
from lemonpack.sourcedate import source_date_epoch

#: Layer compressions (:mod:`lemonpack.oci.layer`).
COMPRESSIONS = ("gzip", "zstd")


@dataclass(frozen=True)
class BuildPlan:
    """A resolved build. ``recipes``: the loaded recipes, in the order given; ``files``: the
    file of each (None for a recipe passed as a model); ``bases``: ``extends`` bases found
    among the discovered recipes (id -> recipe); ``out``: the layout directory; ``os``,
    ``accelerator``, ``arch``: the narrowing (None: all); ``cpu_arch``: the images' OCI
    architecture; ``compression``; ``mirror`` (None: origins; for ``example`` the mirror is
    served from the package when written); ``base``: the ``--base`` reference or None;
    ``epoch``: the timestamp of every file; ``example``: the shipped example;
    ``cache``: the artifact cache (None: the default); ``source_url``/``revision``: the
    ``org.opencontainers.image.source``/``.revision`` of the images (``--source-url``,
    ``--revision``; None: not written)."""

    recipes: tuple[Recipe, ...]
    files: tuple[Path | None, ...]
    out: Path
    cpu_arch: str
    compression: str
    epoch: int
    os: str | None = None
    accelerator: str | None = None
    arch: str | None = None
    mirror: Mirror | None = None
    base: str | None = None
    example: bool = False
    bases: Mapping[str, Recipe] = field(default_factory=dict)
    cache: ArtifactCache | None = None
    source_url: str | None = None
    revision: str | None = None

    def targets(self) -> list[tuple[Recipe, Any]]:
        """``(recipe, EffectiveBlock)`` per target the build will write (a narrowing that
        leaves a recipe nothing raises :class:`~lemonpack.errors.SelectionError`)."""
        return [(r, t) for r in self.recipes for t in targets(r, os=self.os, accelerator=self.accelerator,
                                                               arch=self.arch)]

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON (``lemonpack build --dry-run --json``): the resolved inputs and,
        per recipe, the targets (tag suffix, os, accelerator, arch override pattern)."""
        return {
            "recipes": [{"recipe": r.recipe, "file": str(f) if f else None,
                         "targets": [{"tag": f"{r.recipe}.{t.target_name}", "os": t.os, "accelerator": t.accelerator,
                                      "arch": t.arch_pattern} for t in targets(r, os=self.os,
                                                                                accelerator=self.accelerator,
                                                                                arch=self.arch)]}
                        for r, f in zip(self.recipes, self.files)],
            "extends_bases": sorted(self.bases), "out": str(self.out), "os": self.os,
            "accelerator": self.accelerator, "arch": self.arch, "cpu_arch": self.cpu_arch,
            "compression": self.compression, "compressor": compressor(self.compression),
            "mirror": "example (served from the installed package on 127.0.0.1)" if self.example
            else (self.mirror.base_url if self.mirror else None),
            "base": self.base, "epoch": self.epoch, "source_url": self.source_url, "revision": self.revision,
        }


def compressor(compression: str) -> str:
    """What compresses the layers of a ``compression`` build, with its version and level: with
    the inputs, what their bytes depend on (``"zlib-ng 2.3.3, level 2"``; ``"libzstd 1.5.7,
    level 3"``)."""
    from lemonpack.oci.layer import DEFAULT_COMPRESSLEVEL, ZSTD_LEVEL, deflater

    if compression == "zstd":
        import zstandard

        return f"libzstd {'.'.join(map(str, zstandard.ZSTD_VERSION))}, level {ZSTD_LEVEL}"
    return f"{deflater()}, level {DEFAULT_COMPRESSLEVEL}"


def _check_provenance(source_url: str | None, revision: str | None) -> None:
    """``--source-url`` must be an absolute URL (image-spec ``annotations.md``: "URL to get
    source code"), ``--revision`` one word of printable characters; raises :class:`UsageError`."""
    from urllib.parse import urlsplit

    if source_url is not None:
        u = urlsplit(source_url)
        if not u.scheme or not u.netloc or any(c.isspace() for c in source_url):
            raise UsageError(f"{source_url!r} is not an absolute URL (e.g. https://git.example/team/recipes)",
                             param="--source-url")
    if revision is not None and (not revision or not revision.isprintable() or any(c.isspace() for c in revision)):
        raise UsageError(f"{revision!r} is not a revision (a commit id or tag, no spaces)", param="--revision")


def _choice(value: str | None, choices: Sequence[str], param: str) -> None:
    if value is not None and value not in choices:
        raise UsageError(f"{value!r} is not one of {', '.join(choices)}", param=param)


def plan_build(recipes: Sequence[Path | str | Recipe], *, out: Path, os: str | None = None,  # noqa: A002
               accelerator: str | None = None, arch: str | None = None, cpu_arch: str | None = None,
               compression: str = "gzip", mirror: str | Mirror | None = None, allow_insecure_mirror: bool = False,
               base: str | None = None, example: bool = False, epoch: int | None = None,
               source_url: str | None = None, revision: str | None = None,
               cache: ArtifactCache | None = None,
               known: Callable[[], Mapping[str, Recipe]] | None = None) -> BuildPlan:
    """Resolve a build's inputs into a :class:`BuildPlan` (nothing fetched or written).

    ``recipes``: recipe files (or already loaded recipes); ``example``: build the shipped
    example instead (then no recipes and no ``mirror``; ``$LEMONPACK_MIRROR`` is checked, then ignored);
    ``cpu_arch``: default the host's; ``mirror``: a URL or :class:`Mirror` (default
    ``$LEMONPACK_MIRROR``); ``epoch``: default ``SOURCE_DATE_EPOCH``; ``source_url``/``revision``:
    the images' ``org.opencontainers.image.source``/``.revision`` (None: none); ``known``: returns the
    recipes an ``extends`` base may come from when it is not among ``recipes`` (called only
    then; the CLI passes discovery). Raises as the module docstring says."""
    recipes = list(recipes)
    if example and recipes:
        raise UsageError("--example builds the shipped example alone, from its own loopback mirror; "
                         "build your recipes in another run", param="--example")
    if example and mirror:
        value = mirror.base_url if isinstance(mirror, Mirror) else mirror
        raise UsageError(f"{value!r} cannot be used with --example, which builds the shipped example from its "
                         "own loopback mirror; a mirror (an http:// or https:// URL with a host, such as "
                         "http://127.0.0.1:8080) is for building your recipes, in another run", param="--mirror")
    if example:
        from lemonpack.examples import example_recipes

        recipes = list(example_recipes())
    if not recipes:
        raise UsageError("give at least one RECIPE.json (or --example)", param="RECIPE.json")
    _choice(os, OS_NAMES, "--os")
    _choice(accelerator, ACCELERATORS, "--accelerator")
    _choice(cpu_arch, OCI_ARCHITECTURES, "--cpu-arch")
    _choice(compression, COMPRESSIONS, "--compression")
    _check_provenance(source_url, revision)
    # checked for the example too (a bad $LEMONPACK_MIRROR is exit 2 from every command), then not used
    checked = mirror if isinstance(mirror, Mirror) else Mirror.from_env(mirror, allow_insecure=allow_insecure_mirror)
    resolved_mirror = None if example else checked
    loaded: list[Recipe] = []
    files: list[Path | None] = []
    problems: list[Problem] = []
    for r in recipes:
        if isinstance(r, Recipe):
            loaded.append(r)
            files.append(None)
            continue
        try:
            loaded.append(load_recipe(r))
            files.append(Path(r))
        except ManifestError as e:
            problems.extend(e.problems)
    if problems:
        raise ManifestError(problems)
    if arch is not None:
        _check_arch_matches(loaded, arch, os, accelerator)
    return BuildPlan(recipes=tuple(loaded), files=tuple(files), out=Path(out), os=os, accelerator=accelerator,
                     arch=arch, cpu_arch=cpu_arch or host_arch(), compression=compression,
                     mirror=resolved_mirror, base=base, example=example,
                     epoch=source_date_epoch() if epoch is None else epoch,
                     bases=_missing_bases(loaded, known), cache=cache, source_url=source_url, revision=revision)


def _missing_bases(recipes: Sequence[Recipe], known) -> dict[str, Recipe]:
    """The ``known`` recipes (id -> recipe) not among ``recipes``, when one of ``recipes``
    extends a base not given; empty otherwise (``known`` is then not called)."""
    given = {r.recipe for r in recipes}
    if known is None or all(r.extends is None or r.extends in given for r in recipes):
        return {}
    return {rid: r for rid, r in known().items() if rid not in given}


def _check_arch_matches(recipes: Sequence[Recipe], arch: str, os_name: str | None, accelerator: str | None) -> None:
    """``--arch X`` must pick an arch override of at least one chosen block; otherwise the
    build would silently be the base blocks. Raises UsageError (exit 2) naming the arch and
    the overrides the chosen blocks declare."""
    chosen, overrides = False, []
    for r in recipes:
        try:
            picked = targets(r, os=os_name, accelerator=accelerator, arch=arch)
            every = targets(r, os=os_name, accelerator=accelerator)
        except SelectionError:
            continue  # build_recipes reports a narrowing that leaves nothing
        chosen = chosen or any(t.arch_pattern for t in picked)
        overrides += [f"{r.recipe}:{t.os}/{t.accelerator}:{t.arch_pattern}" for t in every if t.arch_pattern]
    if not chosen:
        have = ("the overrides are: " + ", ".join(overrides)) if overrides else \
            "the chosen blocks declare no arch overrides"
        raise UsageError(f"{arch!r} matches no arch override of the chosen targets, so the build would "
                         f"be the base blocks; {have} (omit --arch to build every block and override)", param="--arch")


def _open_local_base(spec: str, _stack: contextlib.ExitStack) -> BaseSource:
    from lemonpack.oci.base import open_base

    return open_base(spec)


def write_build(plan: BuildPlan, *, progress: bool | None = None,
                on_target: Callable[[TargetResult], None] | None = None,
                open_base: Callable[[str, contextlib.ExitStack], BaseSource] = _open_local_base) -> BuildResult:
    """Carry out ``plan``: open its base (``open_base(spec, stack)``; the default reads
    ``oci:DIR[:TAG]`` layouts, :func:`lemonpack.registry.base.open_base_ref` also pulls
    registry bases), serve the example's mirror for an ``example`` plan, and build with
    :func:`~lemonpack.builder.pipeline.build_recipes` into ``plan.out`` (replaced atomically).
    ``progress``: download bars (None: when stderr is a terminal); ``on_target``: called per
    target written. Returns the :class:`~lemonpack.builder.pipeline.BuildResult`; raises what
    the pipeline raises."""
    with contextlib.ExitStack() as stack:
        base_source = open_base(plan.base, stack) if plan.base is not None else None
        mirror = plan.mirror
        if plan.example:  # the example's artifact is served from the package, whatever LEMONPACK_MIRROR says
            from lemonpack.examples import serve_mirror

            mirror = Mirror(stack.enter_context(serve_mirror()))
        opts = BuildOptions(out=plan.out, os=plan.os, accelerator=plan.accelerator, arch=plan.arch, mirror=mirror,
                            cache=plan.cache, epoch=plan.epoch, cpu_arch=plan.cpu_arch, progress=progress,
                            base=base_source, compression=plan.compression, source_url=plan.source_url,
                            revision=plan.revision)
        return build_recipes(list(plan.recipes), opts, on_target=on_target, bases=plan.bases)


__all__ = ["BuildPlan", "COMPRESSIONS", "compressor", "plan_build", "write_build"]
