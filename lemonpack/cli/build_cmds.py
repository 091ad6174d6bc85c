"""``lemonpack build`` and ``lemonpack install``: recipes into verified OCI layouts and
Nix expressions, or into the runtime's install directory."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from lemonpack.cli._app import (POLICY_OPTION, REGISTRIES_D_OPTION, REGISTRY_CONFIG_OPTION, confirm_install,
                                JSON_OPTION, app, console, err_console, print_json)

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


@app.command()
def build(recipes: list[Path] = typer.Argument(None, help="Recipe JSON files.", metavar="[RECIPE.json]..."),
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
          source_url: str = typer.Option(None, "--source-url", metavar="URL",
                                         help="Write org.opencontainers.image.source (the repository of the "
                                              "recipes) on the image manifests."),
          revision: str = typer.Option(None, "--revision", metavar="REV",
                                       help="Write org.opencontainers.image.revision (the commit of the "
                                            "recipes) on the image manifests."),
          dry_run: bool = typer.Option(False, "--dry-run", help="Print the build plan (the resolved recipes, "
                                       "targets and defaults) and build nothing."),
          attest: str = typer.Option(None, "--attest", metavar="PREFIX.key",
                                     help="Also write signed attestations of what the build used (SLSA provenance "
                                          "v1 and an SPDX 2.3 SBOM, DSSE envelopes signed with this cosign key) "
                                          "beside each image, under the tag sha256-<hex>.att."),
          json_out: bool = JSON_OPTION) -> int:
    """Build recipes into a byte-reproducible OCI image layout (+ Nix expressions).

    Every artifact is fetched once into the cache and verified by sha256 while streaming;
    every container image must be pinned by digest. Tags: <recipe> (the image index) and
    <recipe>.<target> per target, e.g. llamacpp-per-platform.linux-rocm. Nix files land in
    OUT/nix/<recipe>/ for recipes with artifacts. OUT holds exactly the recipes of this run:
    an existing layout there is replaced atomically. Timestamps come from SOURCE_DATE_EPOCH
    (default 0). With --base REF the images run: the base's layers, then the engine's, and
    Entrypoint the engine (podman run IMAGE -m /models/x.gguf --port 8080). With --attest KEY
    each image gets signed attestations of its inputs (lemonpack verify --attestation).
    """
    from importlib import import_module  # the registry room (httpx) only when --base names a registry

    from lemonpack.builder.plan import plan_build, write_build
    from lemonpack.runtime.recipes.discovery import discovered_recipes

    plan = plan_build(recipes or [], out=out, os=os_name, accelerator=accelerator, arch=arch, cpu_arch=cpu_arch,
                      compression=compression, mirror=mirror, allow_insecure_mirror=allow_insecure_mirror,
                      base=base, example=example, known=discovered_recipes, source_url=source_url,
                      revision=revision)
    if dry_run:
        return _print_plan(plan, json_out)
    if attest is not None:  # imported when asked for: a warm build only checks its caches
        from lemonpack.builder.attest import attest_build
        from lemonpack.cli.signing_cmds import load_private_key
    private = load_private_key(attest) if attest is not None else None  # a wrong password fails before the build
    result = write_build(plan, progress=progress, on_target=None if json_out else _print_target,
                         open_base=lambda ref, stack: import_module("lemonpack.registry.base").open_base_ref(
                             ref, stack, insecure=insecure, registry_config=registry_config))
    attested = attest_build(plan, result, private) if private is not None else None
    if json_out:
        print_json({**result.to_json(), **({"attestations": attested} if attested is not None else {})})
    else:
        _print_built(result, out, base, attested)
    return 0


def _print_built(result, out: Path, base: str | None, attested: list[dict] | None) -> None:
    """What ``build`` wrote, for a person: the indexes, roll_forward observations, Nix files,
    how to run a based image, and the attestations (on stderr)."""
    from lemonpack.digest import sha256_text

    _print_attested(attested)
    for rid, digest in result.indexes.items():
        console.print(f"{rid}: {digest} -> {out} (tag {rid})", markup=False)
    for t in result.targets:
        if t.policy == "roll_forward":
            console.print(f"  {t.tag}: roll_forward, observed {sha256_text(t.sha256)}", markup=False)
    for rel in result.nix:
        console.print(f"  nix: {out / rel}/default.nix", markup=False)
    if base is not None:
        for t in result.targets:
            if t.kind == "image":
                console.print(f"  runnable: lemonpack load {out}:{t.tag}, then podman run IMAGE "
                              f"<engine flags>", markup=False)


def _print_attested(done: list[dict] | None) -> None:
    """One line per attested recipe (``--attest``), on stderr."""
    for d in done or ():
        err_console.print(f"  attested {d['recipe']}: {len(d['tags'])} subject(s), SLSA provenance v1 + SPDX 2.3 "
                          f"(tags sha256-<hex>.att)", markup=False)


def _print_target(t) -> None:
    """One progress line per target written (stderr)."""
    from lemonpack.digest import sha256_text

    what = f"{t.source} {sha256_text(t.sha256)}" if t.source else (", ".join(t.images) or "recipe")
    err_console.print(f"  {t.tag:<48} {t.kind:<6} {t.digest[:19]}  {what}", markup=False)


def _print_plan(plan, json_out: bool) -> int:
    """Print a build plan (``--dry-run``): JSON with ``--json``, else one line per input and target."""
    doc = plan.to_json()
    if json_out:
        print_json(doc)
        return 0
    for key in ("out", "os", "accelerator", "arch", "cpu_arch", "compression", "compressor", "mirror", "base", "epoch"):
        console.print(f"{key}: {'-' if doc[key] is None else doc[key]}", markup=False)
    if doc["extends_bases"]:
        console.print(f"extends bases (discovered): {', '.join(doc['extends_bases'])}", markup=False)
    for r in doc["recipes"]:
        console.print(f"{r['recipe']} ({r['file'] or '-'})", markup=False)
        for t in r["targets"]:
            console.print(f"  {t['tag']}: {t['os']}/{t['accelerator']}" + (f" arch {t['arch']}" if t["arch"] else ""),
                          markup=False)
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
            policy: Path = POLICY_OPTION,
            registries_d: Path = REGISTRIES_D_OPTION,
            json_out: bool = JSON_OPTION) -> int:
    """Install a variant_of recipe's artifact for this host (download, verify, unpack).

    RECIPE may also be oci://HOST/REPO@sha256:... (what `lemonpack publish` pushed): the
    recipe and its artifact are pulled and verified (and the signature, with --key), after the
    trust policy (--policy/--registries.d, else the default places) accepted it (else exit 3).

    The artifact lands in <cache>/external/<recipe>/, where its launch plan finds the
    binary (RFC section 10). Prints the provenance and a no-sandbox disclosure first and
    asks for consent; --yes skips the question, and a non-interactive run without --yes
    refuses. --example installs the shipped example engine: then `lemonpack run --example`.
    """
    from lemonpack.builder.install import InstallPlan, install_recipe, prepare_install
    from lemonpack.builder.ociinstall import OciInstallPlan, prepare_oci_install
    from lemonpack.cli.signing_cmds import load_verification_key
    from lemonpack.contract import detect_host, load_recipe
    from lemonpack.examples import EXAMPLE_RECIPE
    from lemonpack.runtime.recipes.discovery import Discovery

    plan: InstallPlan | OciInstallPlan
    if recipe_ref and recipe_ref.startswith("oci://"):
        plan = prepare_oci_install(recipe_ref, key=key, read_key=load_verification_key, accelerator=accelerator,
                                   arch=arch, insecure=insecure, registry_config=registry_config, policy=policy,
                                   registries_d=registries_d)
    else:
        if key or insecure or registry_config or policy or registries_d:
            raise typer.BadParameter("--key, --insecure, --registry-config, --policy and --registries.d apply to "
                                     "oci:// installs",
                                     param_hint="--key")
        if example and recipe_ref:
            raise typer.BadParameter("--example installs the shipped example alone, from its own loopback mirror",
                                     param_hint="--example")
        if not example and not recipe_ref:
            raise typer.BadParameter("give a RECIPE (or --example)", param_hint="RECIPE")
        recipe = load_recipe(EXAMPLE_RECIPE) if example else Discovery().resolve(recipe_ref)
        plan = prepare_install(recipe, detect_host(), accelerator=accelerator, arch=arch, mirror=mirror,
                               allow_insecure_mirror=allow_insecure_mirror, example=example)
    for w in plan.warnings:
        err_console.print(f"warning: {w}", markup=False)
    if not json_out:
        for line in plan.disclosure():
            err_console.print(line, markup=False)
    confirm_install(yes)
    done = plan.install() if isinstance(plan, OciInstallPlan) else install_recipe(plan, progress=progress)
    return _print_installed(done, plan.warnings, json_out, example)


def _print_installed(done: dict, warnings: tuple[str, ...], json_out: bool, example: bool) -> int:
    """Print what an install did: its receipt as JSON (with the plan's ``warnings``, for an install
    from a recipe), else one line (with the manifest for an install from a registry) and the next
    step of ``--example``."""
    if json_out:
        print_json(done if "from" in done else {**done, "warnings": list(warnings)})
        return 0
    origin = f" (from {done['from']['manifest']})" if "from" in done else ""
    console.print(f"installed {done['recipe']} -> {done['path']}{origin}", markup=False)
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
                                      "is an executable regular file inside the unpacked tree."),
           cpu_arch: str = typer.Option(None, "--cpu-arch", metavar="ARCH", help="Fail unless every executable "
                                        "(ELF, PE, Mach-O) in the tree is for this OCI architecture (amd64, "
                                        "arm64 ...).")) -> int:
    """Unpack an artifact with install's safety rules (what the Nix recipe packages run).

    tar (plain, gzip, bzip2, xz), zip, or one file (copied into DIR, said on stderr;
    executable only if it was or --binary names it): no absolute or '..' member names, no
    link escaping DIR, no device files; setuid bits dropped; atomic (nothing left at DIR
    on failure). Exit 5 on an unsafe member, naming it; exit 1 on an executable for
    another CPU than --cpu-arch, naming it.
    """
    import stat

    from lemonpack.builder.artifact import check_executables
    from lemonpack.errors import UnsafeContentError
    from lemonpack.exe_header import OCI_ARCHITECTURES
    from lemonpack.fetch.archive import detect_format, extract
    from lemonpack.files import remove_tree
    from lemonpack.safetree import name_problem, path_problem

    if binary is not None and (path_problem(binary) or name_problem(binary)):
        raise typer.BadParameter(f"not a relative path inside the artifact: {binary!r}", param_hint="--binary")
    if cpu_arch is not None and cpu_arch not in OCI_ARCHITECTURES:
        raise typer.BadParameter(f"{cpu_arch!r} is not one of {', '.join(OCI_ARCHITECTURES)}", param_hint="--cpu-arch")
    hint = name or archive.name
    # a non-archive keeps its own mode, unless --binary names it (the recipe says it runs)
    extract(archive, out, name_hint=hint, label=label or str(archive), file_mode=0o755 if binary == hint else None)
    if cpu_arch is not None:
        try:
            check_executables(out, cpu_arch, f"{label or archive}")
        except BaseException:
            remove_tree(out)  # nothing left at DIR on failure
            raise
    if binary is not None:
        target = out / binary
        info = os.lstat(target) if os.path.lexists(target) else None
        if info is None or not stat.S_ISREG(info.st_mode) or not info.st_mode & 0o111:
            remove_tree(out)  # nothing left at DIR on failure
            raise UnsafeContentError(f"{label or archive}: the recipe's binary {binary!r} is not an executable "
                                     f"regular file in the artifact")
    if detect_format(archive, hint) == "file":
        err_console.print(f"lemonpack: {archive} is not an archive; copied as a file to {out / hint}", markup=False)
    console.print(str(out), markup=False)
    return 0
