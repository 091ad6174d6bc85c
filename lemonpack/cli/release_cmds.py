"""``lemonpack release``: the release lock and ``containers/*.json`` into one reproducible
OCI image layout per release image (seed 002 section 6)."""

from __future__ import annotations

from pathlib import Path

import typer

from lemonpack.cli._app import JSON_OPTION, REGISTRY_CONFIG_OPTION, app, console, err_console, print_json
from lemonpack.cli.build_cmds import INSECURE_OPTION, MIRROR_OPTION


@app.command()
def release(lock: Path = typer.Option(..., "--lock", help="The release lock (extensions.lock)."),
            out: Path = typer.Option(..., "--out", "-o", help="Directory to write: one OCI layout per image "
                                     "(OUT/<name>/) and OUT/release.json."),
            tree: Path = typer.Option(None, "--tree", help="Repository top: where extensions are discovered and "
                                      "recipe paths start (default: the lock's directory)."),
            containers: Path = typer.Option(None, "--containers", help="Directory of release image definitions "
                                            "(default: <tree>/containers)."),
            only: list[str] = typer.Option(None, "--image", metavar="NAME",
                                           help="Build only this image (repeatable; default: every definition)."),
            mirror: str = MIRROR_OPTION,
            allow_insecure_mirror: bool = INSECURE_OPTION,
            progress: bool = typer.Option(None, "--progress/--no-progress",
                                          help="Download progress bars (default: when stderr is a terminal)."),
            base: str = typer.Option(None, "--base", metavar="REF",
                                     help="Build every image on this base (oci:DIR[:TAG] or HOST/REPO@sha256:<hex>), "
                                          "overriding the definitions' base: gufo is compiled and the image runs "
                                          "bin/gufo-registry (podman run IMAGE --json)."),
            insecure: bool = typer.Option(False, "--insecure", help="With a registry base: allow plain HTTP to a "
                                          "registry that is not on a loopback address."),
            registry_config: Path = REGISTRY_CONFIG_OPTION,
            json_out: bool = JSON_OPTION) -> int:
    """Write reproducible release images: one OCI image layout per containers/*.json.

    Each image holds the lock's extensions (sources), the generated registry, constants
    header and extensions.json for the definition's features, the lock, and the recipe
    artifacts the definition names (fetched, verified by sha256, unpacked). Per image an
    index over one manifest per architecture; tags <name> and <name>.<arch>. Timestamps come
    from SOURCE_DATE_EPOCH (default 0): same inputs, same digests, on any machine. OUT is
    replaced atomically, and only when the whole release succeeded. On a base (--base or a
    definition's base) gufo is compiled and shipped as /opt/gufo/bin/gufo-registry, the
    image's Entrypoint.
    """
    from lemonpack.sourcedate import source_date_epoch
    from lemonpack.fetch import Mirror
    from lemonpack.release import ReleaseOptions
    from lemonpack.release import release as run_release

    import contextlib

    from lemonpack.registry.base import open_base_ref

    stack = contextlib.ExitStack()
    opts = ReleaseOptions(out=out, lock=lock, tree=tree, containers=containers, only=tuple(only or ()),
                          mirror=Mirror.from_env(mirror, allow_insecure=allow_insecure_mirror),
                          epoch=source_date_epoch(), progress=progress, base=base,
                          open_base=lambda spec: open_base_ref(spec, stack, insecure=insecure,
                                                               registry_config=registry_config))

    def fetching(recipe: str, url: str, done: bool) -> None:
        if not json_out and not done:
            err_console.print(f"  fetch {recipe}: {url}", markup=False)

    def report(image) -> None:
        if not json_out:
            err_console.print(f"  {image.name:<24} {image.index[:19]}  {', '.join(image.manifests)}  "
                              f"{len(image.extensions)} extensions, api {image.api_version}", markup=False)

    with stack:
        result = run_release(opts, on_image=report, on_fetch=fetching)
    if json_out:
        print_json(result.to_json())
    else:
        for image in result.images:
            console.print(f"{image.name}: {image.index} -> {image.layout} (tags {image.name}, "
                          + ", ".join(f"{image.name}.{a}" for a in image.manifests) + ")", markup=False)
    return 0
