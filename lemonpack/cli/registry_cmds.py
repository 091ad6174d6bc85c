"""``lemonpack publish``, ``pull`` and ``pin``: OCI layouts to and from registries, recipe
image tags to digests (room :mod:`lemonpack.registry`)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from lemonpack.cli._app import (INSECURE_OPTION as INSECURE, JSON_OPTION, POLICY_OPTION, REGISTRIES_D_OPTION,
                                REGISTRY_CONFIG_OPTION as REGISTRY_CONFIG, app, console, err_console, print_json)


def _client(host: str, insecure: bool, registry_config: Path | None):
    from lemonpack.registry import RegistryClient

    return RegistryClient(host, insecure=insecure, registry_config=registry_config)


def _show_progress(progress: bool | None, json_out: bool) -> bool:
    if progress is None:
        return sys.stderr.isatty() and not json_out
    return progress


@app.command("publish")
def publish(source: str = typer.Argument(..., metavar="DIR[:TAG]|RECIPE.json",
                                         help="An OCI image layout (optionally one of its tags), or a recipe "
                                              "to build first."),
            to: str = typer.Option(..., "--to", metavar="HOST[:PORT]/REPO[:TAG]",
                                   help="Destination repository (and tag: default each layout tag's own name)."),
            mount_from: list[str] = typer.Option([], "--mount-from", metavar="REPO",
                                                 help="Mount missing blobs from this repository of the same "
                                                      "registry instead of uploading them (repeatable)."),
            mirror: str = typer.Option(None, "--mirror", metavar="URL",
                                       help="When building a recipe: fetch artifacts from this base URL."),
            insecure: bool = INSECURE,
            registry_config: Path = REGISTRY_CONFIG,
            progress: bool = typer.Option(None, "--progress/--no-progress",
                                          help="Upload progress bar (default: when stderr is a terminal)."),
            base: str = typer.Option(None, "--base", metavar="REF",
                                     help="When building a recipe: build runnable images on this base "
                                          "(oci:DIR[:TAG] or HOST/REPO@sha256:<hex>), as lemonpack build --base."),
            sign: str = typer.Option(None, "--sign", metavar="PREFIX.key",
                                     help="After the push, sign every pushed image/index with this cosign "
                                          "private key (password from $LEMONPACK_PASSWORD or a prompt)."),
            attest: str = typer.Option(None, "--attest", metavar="PREFIX.key",
                                       help="With a RECIPE.json: after the push, attach signed attestations of what "
                                            "the build used (SLSA provenance v1, SPDX 2.3 SBOM) to every pushed "
                                            "image under sha256-<hex>.att, signed with this cosign key."),
            json_out: bool = JSON_OPTION) -> int:
    """Push an OCI image layout to a registry byte for byte (a recipe is built first).

    A RECIPE.json is built as lemonpack build builds it: --to HOST/REPO:TAG pushes its image
    index (one manifest per target: platform block x arch override) under TAG; --to HOST/REPO
    pushes every tag of the build (<recipe> and each <recipe>.<target>).

    Children go before the index that names them; blobs the repository already has are
    skipped (HEAD), blobs of --mount-from repositories are mounted, the rest are streamed from
    disk in chunks and hashed as they go: a blob file that is not what its name says is refused
    (exit 3) before the registry commits it. Transient failures are retried with backoff. Every
    digest the registry answers is checked against the local one. A layout tag that is no
    registry tag (a full name such as docker.io/x/a:1) is refused before anything is sent:
    publish it as DIR:TAG --to HOST/REPO:NEWTAG. With --sign, each pushed manifest is then signed
    as `lemonpack sign HOST/REPO@DIGEST --key` does (the key is opened before anything is sent).
    With --attest KEY (a RECIPE.json only), the build's provenance and SBOM are attached to the
    index and every manifest as cosign attest does (check them with verify --attestation).
    Examples:
    lemonpack publish out/layout --to 127.0.0.1:5000/engines ;
    lemonpack publish out/layout:hello-engine --to 127.0.0.1:5000/engines/hello:v1 ;
    lemonpack publish recipe.json --to registry.example/engines/x
    """
    from functools import partial
    from importlib import import_module  # recipe discovery (~4 MiB) is imported only for a recipe

    from lemonpack.builder.publish import publish_source
    from lemonpack.registry.base import open_base_ref
    from lemonpack.oci.reference import parse_registry_reference
    from lemonpack.registry.transfer import publish_layout

    dest = parse_registry_reference(to)
    show = _show_progress(progress, json_out)
    if sign is not None or attest is not None:  # imported when asked for: a layout's publish needs neither
        from lemonpack.cli.signing_cmds import load_private_key
    private = load_private_key(sign) if sign is not None else None  # a wrong password fails before the push
    attest_key = load_private_key(attest) if attest is not None else None
    signed: list[dict] = []
    attested: list[dict] | None = None
    from lemonpack.registry.partials import publish_workdir

    with publish_workdir() as tmp:
        src = publish_source(source, Path(tmp), dest_tag=dest.tag, base=base, mirror=mirror, progress=show,
                             known=lambda: import_module("lemonpack.runtime.recipes.discovery").discovered_recipes(),
                             open_base=partial(open_base_ref, insecure=insecure, registry_config=registry_config))
        _print_built(src, json_out)
        if attest_key is not None:
            from lemonpack.builder.attest import attest_published, check_publish_attest
        plan = check_publish_attest(src.plan, source) if attest_key is not None else None  # before the push
        with _client(dest.host, insecure, registry_config) as client:
            result = publish_layout(src.layout, dest, client, tag=src.tag, mount_from=mount_from, progress=show)
            if private is not None:
                from lemonpack.signing.remote import sign_published

                signed = sign_published(result, private, insecure=insecure, client=client)
            if plan is not None and attest_key is not None and src.built is not None:
                attested = attest_published(plan, src.built, attest_key, client, dest.repository)
    _print_published(result, signed if private is not None else None, json_out, attested)
    return 0


def _print_published(result, signed: list[dict] | None, json_out: bool, attested: list[dict] | None = None) -> None:
    """What was pushed (and signed, when ``signed`` is not None; attested, when ``attested`` is
    not None): JSON, or one line per tag."""
    if json_out:
        doc = result.to_json()
        if signed is not None:
            doc["signed"] = signed
        if attested is not None:
            doc["attested"] = attested
        print_json(doc)
        return
    for a in attested or ():
        for one in a["attached"]:
            console.print(f"attested {result.reference}@{one['digest']} -> {one['attestation_tag']} "
                          f"({one['attestations']} attestation(s))", markup=False)
    for p in result.pushed:
        console.print(f"{result.reference}:{p.tag}@{p.digest}", markup=False)
    for s in signed or ():
        console.print(f"signed {s['reference']} -> {s['signature_tag']} ({s['signatures']} signature(s))",
                      markup=False)
    err_console.print(f"sent {result.bytes_sent} blob bytes: {result.blobs_uploaded} uploaded, "
                      f"{result.blobs_skipped} already there, {result.blobs_mounted} mounted; "
                      f"{result.manifests_sent} manifest PUTs", markup=False)


def _print_built(src, json_out: bool) -> None:
    """``built RECIPE: INDEX-DIGEST`` on stderr for a recipe built before the push."""
    for rid, digest in (src.built.indexes.items() if src.built and not json_out else ()):
        err_console.print(f"built {rid}: {digest}", markup=False)


@app.command("pull")
def pull(ref: str = typer.Argument(..., metavar="HOST[:PORT]/REPO[:TAG|@sha256:HEX]"),
         out: Path = typer.Option(..., "--out", "-o", metavar="DIR[:TAG]",
                                  help="OCI image layout directory to write (atomically); DIR:TAG also names the "
                                       "tag, as skopeo's oci:DIR:TAG (an existing DIR:TAG directory is a directory)."),
         tag: str = typer.Option(None, "--tag", help="Tag in the layout (default: the one --out names, else the "
                                                      "reference's tag, else latest)."),
         insecure: bool = INSECURE,
         registry_config: Path = REGISTRY_CONFIG,
         progress: bool = typer.Option(None, "--progress/--no-progress",
                                       help="Download progress bar (default: when stderr is a terminal and "
                                            "--json is not given)."),
         policy: Path = POLICY_OPTION,
         registries_d: Path = REGISTRIES_D_OPTION,
         json_out: bool = JSON_OPTION) -> int:
    """Fetch a published image, index or recipe artifact into an OCI image layout.

    The trust policy (containers-policy.json) is checked first: a tag is resolved to its digest
    once, that digest is judged and then pulled (a rejection exits 3 and writes nothing).

    Every manifest and blob is checked against the digest and size that names it, into a
    temporary directory first: OUT changes only when everything arrived and verified. A new OUT
    is created; an existing layout at OUT gets the tag added (its other tags and files are
    kept, a tag of the same name is replaced), as skopeo copy ... oci:OUT:TAG does; blobs OUT
    holds already (size and sha256 checked) are not downloaded again; a non-empty directory
    that is not a layout is refused. The mirrors containers-registries.conf(5) gives for the
    registry are tried first, then the registry itself.
    """
    from lemonpack.oci.reference import parse_registry_reference
    from lemonpack.errors import Interrupted
    from lemonpack.registry.transfer import pull_image
    from lemonpack.trust.check import Trust

    from lemonpack.errors import InputError
    from lemonpack.oci.layout_reader import split_layout_target

    target, out_tag = split_layout_target(str(out))
    if out_tag is not None:
        if tag is not None and tag != out_tag:
            raise InputError(f"--out {out} names the tag {out_tag!r} and --tag says {tag!r}: give one")
        out, tag = Path(target), out_tag
    r = parse_registry_reference(ref)
    trust = Trust.load(policy, registries_d, insecure=insecure, registry_config=registry_config)
    with _client(r.host, insecure, registry_config) as client:  # one client (and token cache): check, then pull
        try:
            judged = parse_registry_reference(trust.enforce(ref, use="pull", client=client))
        except KeyboardInterrupt:
            raise Interrupted(f"pull of {r} interrupted while checking the trust policy; nothing was written at "
                              f"{out}") from None
        result = pull_image(judged, out, insecure=insecure, registry_config=registry_config, tag=tag or r.tag,
                            progress=_show_progress(progress, json_out),
                            notice=lambda line: err_console.print(line, markup=False), client=client)
    if json_out:
        print_json(result.to_json())
    else:
        kept = f"{result.kept} other tag{'' if result.kept == 1 else 's'} kept"
        if not result.merged:
            where = f"new layout {out}"
        elif result.replaced:
            where = f"existing layout {out}, replacing its tag {result.tag} (was {result.replaced}; {kept})"
        else:
            where = f"existing layout {out} ({kept})"
        console.print(f"{r} -> {where} (tag {result.tag}, {result.digest}, {result.blobs} blobs)", markup=False)
    return 0


@app.command("pin")
def pin(recipe: Path = typer.Argument(..., metavar="RECIPE.json", help="Recipe file to pin in place."),
        check: bool = typer.Option(False, "--check", help="Change nothing; exit 1 when an image is not pinned, 2 when the file is not a recipe."),
        insecure: bool = INSECURE,
        registry_config: Path = REGISTRY_CONFIG,
        json_out: bool = JSON_OPTION) -> int:
    """Resolve every container image tag of a recipe to its digest and rewrite the file.

    Each image's manifest is fetched by tag and hashed (a Docker-Content-Digest header, when
    the registry sends one, must agree) and written as name:tag@sha256:...; everything else in the file stays
    byte for byte (key order, indentation, spacing). An image containing {arch_alias} is
    resolved once per arch alias of the recipe, or the command fails saying why. The file is
    replaced atomically. --check only reports (exit 1 when anything is unpinned). A file the
    recipe contract refuses (not JSON, a JSON array, another tool's file) is refused, exit 2.
    """
    from lemonpack.registry.pin import check_recipe, pin_recipe

    if check:
        unpinned = check_recipe(recipe)
        if json_out:
            print_json({"file": str(recipe), "unpinned": [u.to_json() for u in unpinned]})
        else:
            for u in unpinned:
                err_console.print(f"{recipe}: {u.where}: {u.image} is not pinned by digest", markup=False)
            if not unpinned:
                console.print(f"{recipe}: every container image is pinned", markup=False)
        return 1 if unpinned else 0
    changes = pin_recipe(recipe, insecure=insecure, registry_config=registry_config)
    if json_out:
        print_json({"file": str(recipe), "pinned": [c.to_json() for c in changes]})
    else:
        for c in changes:
            console.print(f"{c.path}: {c.old} -> {c.new}", markup=False)
        if not changes:
            console.print(f"{recipe}: nothing to pin", markup=False)
    return 0
