"""``lemonpack build`` and ``lemonpack install``: recipes into verified OCI layouts and
Nix expressions, or into the runtime's install directory."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import typer

from lemonpack.cli._app import (REGISTRY_CONFIG_OPTION, confirm_install, JSON_OPTION, app, console, err_console,
                                print_json)
from lemonpack.contract.builtins import ACCELERATORS, OS_NAMES
from lemonpack.contract.select import lacking_accelerator_warning

MIRROR_OPTION = typer.Option(
    None, "--mirror", metavar="URL",
    help="Fetch artifacts from this base URL instead of their origin (laid out as <URL>/<host>/<path>); "
         "hashes stay pinned. Default: $LEMONPACK_MIRROR.")
INSECURE_OPTION = typer.Option(False, "--allow-insecure-mirror",
                               help="Allow a plain-http mirror on a non-loopback host.")
EXAMPLE_HELP = ("Build only lemonpack's shipped example recipe (hello-engine), its artifact served from "
                "the installed package on 127.0.0.1 (no network needed); takes no RECIPE.json or --mirror.")


BASE_OPTION = typer.Option(
    None, "--base", metavar="REF",
    help="Build runnable images on this base: oci:DIR[:TAG] (a local OCI image layout) or "
         "HOST/REPO@sha256:<hex> (pulled and verified; a tag is refused). Its layers come first, byte for byte; "
         "Entrypoint is the engine. Without it an image holds the engine alone (not runnable by itself).")


def open_base_arg(spec: str | None, stack, *, insecure: bool = False, registry_config: Path | None = None):
    """The :class:`lemonpack.oci.base.BaseSource` named by ``--base`` (None when not given).
    ``oci:DIR[:TAG]`` is read in place; ``HOST/REPO@sha256:<hex>`` is pulled (every blob
    verified, :func:`lemonpack.registry.transfer.pull_layout`) into a temporary layout that
    ``stack`` removes. Raises LemonpackError (exit 1) naming the base: a tag without a
    digest, a malformed reference, not a layout; the registry client's errors (exit 3/4)."""
    if spec is None:
        return None
    from lemonpack.errors import LemonpackError
    from lemonpack.oci.base import open_base

    if spec.startswith("oci:"):
        return open_base(spec)
    import tempfile

    from lemonpack.oci.reference import InvalidReferenceError
    from lemonpack.registry import RegistryClient
    from lemonpack.registry.reference import parse_reference
    from lemonpack.registry.transfer import pull_layout

    try:
        ref = parse_reference(spec)
    except InvalidReferenceError as exc:
        raise LemonpackError(f"base {spec}: not oci:DIR[:TAG] (a local OCI image layout) or HOST/REPO@sha256:<hex> "
                             f"(a registry image pinned by digest): {exc}") from None
    if ref.digest is None:
        raise LemonpackError(f"base {spec}: not pinned: a tag can move; give HOST/REPO@sha256:<hex> "
                             "(lemonpack pin, skopeo inspect, or the digest `lemonpack publish` printed)")
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lemonpack-base-")))
    with RegistryClient(ref.host, insecure=insecure, registry_config=registry_config) as client:
        pull_layout(ref, tmp / "base", client, tag="base")
    return open_base(spec, layout=tmp / "base", tag="base", reference=f"{ref.host}/{ref.repository}@{ref.digest}")


#: OCI ``architecture`` values (Go's GOARCH names, image-spec config.md).
OCI_ARCHITECTURES = ("amd64", "arm64", "arm", "386", "ppc64le", "s390x", "riscv64", "mips64le", "loong64")


def _check_choice(value: str | None, choices: tuple[str, ...], hint: str) -> None:
    if value is not None and value not in choices:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices)}", param_hint=hint)


def _check_mirror(value: str | None) -> None:
    from urllib.parse import urlsplit

    value = value if value is not None else os.environ.get("LEMONPACK_MIRROR") or None
    if value is None:
        return
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise typer.BadParameter(f"{value!r} is not an http(s) base URL such as http://127.0.0.1:8080",
                                 param_hint="--mirror / LEMONPACK_MIRROR")


def _check_arch_matches(recipes, arch: str, os_name: str | None, accelerator: str | None) -> None:
    """``--arch X`` must pick an arch override of at least one chosen block; otherwise the
    build would silently be the base blocks. Raises typer.BadParameter (exit 2) naming the
    arch and the overrides the chosen blocks declare."""
    from lemonpack.contract import targets
    from lemonpack.errors import SelectionError

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
        raise typer.BadParameter(f"{arch!r} matches no arch override of the chosen targets, so the build would "
                                 f"be the base blocks; {have} (omit --arch to build every block and override)",
                                 param_hint="--arch")


def _discovered_bases(recipes) -> dict:
    """The recipes discovery finds (id -> resolved recipe), for ``extends`` bases not given
    on the command line; empty when every base is given or nothing extends."""
    given = {r.recipe for r in recipes}
    if all(r.extends is None or r.extends in given for r in recipes):
        return {}
    from lemonpack.runtime.discovery import Discovery

    return {rid: d.recipe for rid, d in Discovery().scan().recipes.items() if rid not in given}


@app.command()
def build(recipes: list[Path] = typer.Argument(None, help="Recipe JSON files.", metavar="RECIPE.json"),
          out: Path = typer.Option(..., "--out", "-o", help="OCI image layout directory to write."),
          os_name: str = typer.Option(None, "--os", help="Only targets for this OS (linux, darwin, windows)."),
          accelerator: str = typer.Option(None, "--accelerator", help="Only targets for this accelerator."),
          arch: str = typer.Option(None, "--arch", help="Build for this concrete GPU arch (e.g. gfx1151): "
                                   "per block, the arch override that applies to it."),
          mirror: str = MIRROR_OPTION,
          allow_insecure_mirror: bool = INSECURE_OPTION,
          cpu_arch: str = typer.Option(None, "--cpu-arch", help="OCI architecture of the images "
                                       "(default: this machine's, e.g. amd64)."),
          progress: bool = typer.Option(None, "--progress/--no-progress",
                                        help="Download progress bars (default: when stderr is a terminal)."),
          example: bool = typer.Option(False, "--example", help=EXAMPLE_HELP),
          base: str = BASE_OPTION,
          compression: str = typer.Option("gzip", "--compression", metavar="gzip|zstd",
                                          help="Layer compression: gzip (tar+gzip, default, every engine reads "
                                               "it) or zstd (tar+zstd: podman, skopeo, containerd >= 1.5)."),
          insecure: bool = typer.Option(False, "--insecure", help="With a registry --base: allow plain HTTP "
                                        "to a registry that is not on a loopback address."),
          registry_config: Path = REGISTRY_CONFIG_OPTION,
          json_out: bool = JSON_OPTION) -> int:
    """Build recipes into a byte-reproducible OCI image layout (+ Nix expressions).

    Every artifact is fetched once into the cache and verified by sha256 while streaming;
    every container image must be pinned by digest. Tags: <recipe> (the image index) and
    <recipe>.<target> per target, e.g. llamacpp-per-platform.linux-rocm. Nix files land in
    OUT/nix/<recipe>/ for recipes with artifacts. OUT holds exactly the recipes of this run:
    an existing layout there is replaced atomically. Timestamps come from SOURCE_DATE_EPOCH
    (default 0). With --base REF the images run: the base's layers, then the engine's, and
    Entrypoint the engine (podman run IMAGE -m /models/x.gguf --port 8080).
    """
    from lemonpack.builder.pipeline import BuildOptions, build_recipes, source_date_epoch
    from lemonpack.contract import load_recipe
    from lemonpack.errors import ManifestError
    from lemonpack.fetch import Mirror

    import contextlib

    from lemonpack.examples import example_recipes, serve_mirror

    recipes = list(recipes or [])
    if example and (recipes or mirror):
        raise typer.BadParameter("--example builds the shipped example alone, from its own loopback mirror; "
                                 "build your recipes in another run", param_hint="--example")
    if example:
        recipes = example_recipes()
    if not recipes:
        raise typer.BadParameter("give at least one RECIPE.json (or --example)", param_hint="RECIPE.json")
    _check_choice(os_name, OS_NAMES, "--os")
    _check_choice(accelerator, ACCELERATORS, "--accelerator")
    _check_choice(cpu_arch, OCI_ARCHITECTURES, "--cpu-arch")
    _check_choice(compression, ("gzip", "zstd"), "--compression")
    if not example:  # the example ignores LEMONPACK_MIRROR
        _check_mirror(mirror)
    loaded, problems = [], []
    for path in recipes:
        try:
            loaded.append(load_recipe(path))
        except ManifestError as e:
            problems.extend(e.problems)
    if problems:
        raise ManifestError(problems)
    if arch is not None:
        _check_arch_matches(loaded, arch, os_name, accelerator)
    stack = contextlib.ExitStack()
    base_source = open_base_arg(base, stack, insecure=insecure, registry_config=registry_config)
    if example:  # the example's artifact is served from the package, whatever LEMONPACK_MIRROR says
        mirror = stack.enter_context(serve_mirror())
    opts = BuildOptions(base=base_source, compression=compression,
        out=out, os=os_name, accelerator=accelerator, arch=arch,
        mirror=Mirror.from_env(mirror, allow_insecure=allow_insecure_mirror),
        epoch=source_date_epoch(),
        cpu_arch=cpu_arch or {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine()),
        progress=progress)

    def report(t):
        if not json_out:
            what = f"{t.source} sha256:{t.sha256}" if t.source else (", ".join(t.images) or "recipe")
            err_console.print(f"  {t.tag:<48} {t.kind:<6} {t.digest[:19]}  {what}", markup=False)

    with stack:
        result = build_recipes(loaded, opts, on_target=report, bases=_discovered_bases(loaded))
    if json_out:
        print_json(result.to_json())
    else:
        for rid, digest in result.indexes.items():
            console.print(f"{rid}: {digest} -> {out} (tag {rid})", markup=False)
        for t in result.targets:
            if t.policy == "roll_forward":
                console.print(f"  {t.tag}: roll_forward, observed sha256:{t.sha256}", markup=False)
        for rel in result.nix:
            console.print(f"  nix: {out / rel}/default.nix", markup=False)
        if base_source is not None:
            for t in result.targets:
                if t.kind == "image":
                    console.print(f"  runnable: lemonpack load {out}:{t.tag}, then podman run IMAGE "
                                  f"<engine flags>", markup=False)
    return 0


@app.command()
def install(recipe_ref: str = typer.Argument(None, metavar="RECIPE",
                                            help="A variant_of recipe: a JSON file or the id of a discovered recipe."),
            accelerator: str = typer.Option(None, "--accelerator", help="Which platform block's artifact."),
            arch: str = typer.Option(None, "--arch", help="GPU arch for arch overrides (default: detected)."),
            mirror: str = MIRROR_OPTION,
            allow_insecure_mirror: bool = INSECURE_OPTION,
            yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
            progress: bool = typer.Option(None, "--progress/--no-progress",
                                          help="Download progress bar (default: when stderr is a terminal)."),
            example: bool = typer.Option(False, "--example", help="Install lemonpack's shipped example "
                                         "(hello-engine), its artifact served from the installed package on "
                                         "127.0.0.1 (no network needed); takes no RECIPE or --mirror."),
            key: str = typer.Option(None, "--key", metavar="KEY", help="With oci://: verify the cosign "
                                    "signature with this public key (or cosign private key file) first."),
            insecure: bool = typer.Option(False, "--insecure", help="With oci://: allow plain HTTP to a "
                                          "registry that is not on a loopback address."),
            registry_config: Path = REGISTRY_CONFIG_OPTION,
            json_out: bool = JSON_OPTION) -> int:
    """Install a variant_of recipe's artifact for this host (download, verify, unpack).

    RECIPE may also be oci://HOST/REPO@sha256:... (what `lemonpack publish` pushed): the
    recipe and its artifact are pulled and verified (and the signature, with --key).

    The artifact lands in <cache>/external/<recipe>/, where its launch plan finds the
    binary (RFC section 10). Prints the provenance and a no-sandbox disclosure first and
    asks for consent; --yes skips the question, and a non-interactive run without --yes
    refuses. --example installs the shipped example engine: then `lemonpack run --example`.
    """
    import contextlib

    from lemonpack.builder.install import install_recipe, plan_install
    from lemonpack.cli._app import resolve_recipe
    from lemonpack.contract import detect_host, load_recipe
    from lemonpack.examples import EXAMPLE_RECIPE, serve_mirror
    from lemonpack.fetch import Mirror

    if recipe_ref and recipe_ref.startswith("oci://"):
        from lemonpack.cli.signing_cmds import install_oci

        return install_oci(recipe_ref, key=key, insecure=insecure, accelerator=accelerator, arch=arch, yes=yes,
                           json_out=json_out, registry_config=registry_config)
    if key or insecure or registry_config:
        raise typer.BadParameter("--key, --insecure and --registry-config apply to oci:// installs",
                                 param_hint="--key")
    if example and (recipe_ref or mirror):
        raise typer.BadParameter("--example installs the shipped example alone, from its own loopback mirror",
                                 param_hint="--example")
    if not example and not recipe_ref:
        raise typer.BadParameter("give a RECIPE (or --example)", param_hint="RECIPE")
    _check_choice(accelerator, ACCELERATORS, "--accelerator")
    if not example:  # the example ignores LEMONPACK_MIRROR
        _check_mirror(mirror)
    recipe = load_recipe(EXAMPLE_RECIPE) if example else resolve_recipe(recipe_ref)
    facts = detect_host()
    plan = plan_install(recipe, facts, accelerator=accelerator, arch=arch)
    lacking = lacking_accelerator_warning(recipe, facts, plan.block.accelerator, requested=accelerator,
                                          requested_by="--accelerator")
    warnings = [lacking] if lacking else []
    for w in warnings:
        err_console.print(f"warning: {w}", markup=False)
    if not json_out:
        for line in plan.disclosure():
            err_console.print(line, markup=False)
    confirm_install(yes)
    with contextlib.ExitStack() as stack:
        if example:  # the example's artifact is served from the package, whatever LEMONPACK_MIRROR says
            mirror = stack.enter_context(serve_mirror())
        done = install_recipe(plan, mirror=Mirror.from_env(mirror, allow_insecure=allow_insecure_mirror),
                              progress=progress)
    if json_out:
        print_json({**done, "warnings": warnings})
    else:
        console.print(f"installed {recipe.recipe} -> {done['path']}", markup=False)
        if example:
            console.print("next: lemonpack run --example", markup=False)
    return 0


@app.command()
def unpack(archive: Path = typer.Argument(..., metavar="ARCHIVE", help="The artifact file (already verified)."),
           out: Path = typer.Option(..., "--out", metavar="DIR", help="Directory to create (must not exist, "
                                    "or be empty)."),
           name: str = typer.Option(None, "--name", metavar="NAME", help="The artifact's file name (its URL's "
                                    "last segment): format hint, and the file name of a non-archive. "
                                    "Default: ARCHIVE's name."),
           label: str = typer.Option(None, "--label", metavar="TEXT", help="How errors name the artifact "
                                     "(e.g. its URL). Default: ARCHIVE."),
           binary: str = typer.Option(None, "--binary", metavar="PATH", help="Fail unless this relative path "
                                      "is an executable regular file inside the unpacked tree.")) -> int:
    """Unpack an artifact with install's safety rules (what the Nix recipe packages run).

    tar (plain, gzip, bzip2, xz), zip, or one file: no absolute or '..' member names, no
    link escaping DIR, no device files; setuid bits dropped; atomic (nothing left at DIR
    on failure). Exit 5 on an unsafe member, naming it.
    """
    import stat

    from lemonpack.errors import UnsafeContentError
    from lemonpack.fetch.archive import extract
    from lemonpack.files import remove_tree
    from lemonpack.safetree import name_problem

    if binary is not None and (not binary or binary.startswith("/") or name_problem(binary)
                               or any(part in ("", ".", "..") for part in binary.split("/"))):
        raise typer.BadParameter(f"not a relative path inside the artifact: {binary!r}", param_hint="--binary")
    extract(archive, out, name_hint=name or archive.name, label=label or str(archive))
    if binary is not None:
        target = out / binary
        info = os.lstat(target) if os.path.lexists(target) else None
        if info is None or not stat.S_ISREG(info.st_mode) or not info.st_mode & 0o111:
            remove_tree(out)  # nothing left at DIR on failure
            raise UnsafeContentError(f"{label or archive}: the recipe's binary {binary!r} is not an executable "
                                     f"regular file in the artifact")
    console.print(str(out), markup=False)
    return 0
