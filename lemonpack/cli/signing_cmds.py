"""``lemonpack keygen`` / ``sign`` / ``verify`` (cosign's key-based format), ``load`` (into
podman or Docker), ``uninstall``; ``install oci://`` is reached through ``lemonpack install``."""

from __future__ import annotations

from pathlib import Path
import sys

import typer

from lemonpack.cli._app import (INSECURE_OPTION, JSON_OPTION, REGISTRY_CONFIG_OPTION, app, console,
                                print_json)
from lemonpack.errors import ConfigError

PASSWORD_ENV = "LEMONPACK_PASSWORD"


def read_password(*, confirm: bool, what: str) -> bytes:
    """The key password: ``$LEMONPACK_PASSWORD``, else ``$COSIGN_PASSWORD`` (as cosign reads
    it), when set (may be empty), else a hidden prompt on the terminal (twice when
    ``confirm``). Never taken from the command line. Raises :class:`ConfigError` when none is
    available (no terminal)."""
    from lemonpack.signing.keys import password_from_env

    found = password_from_env()
    if found is not None:
        return found[1]
    if not sys.stdin.isatty():
        raise ConfigError(f"no password for {what}: set {PASSWORD_ENV} (or COSIGN_PASSWORD) or run on a terminal")
    return typer.prompt(f"Password for {what}", hide_input=True, confirmation_prompt=confirm,
                        default="", show_default=False, err=True).encode("utf-8")


@app.command("keygen")
def keygen(out: str = typer.Option("cosign", "--out", metavar="PREFIX",
                                   help="Write PREFIX.key (encrypted, mode 0600) and PREFIX.pub."),
           force: bool = typer.Option(False, "--force", help="Overwrite existing PREFIX.key / PREFIX.pub."),
           json_out: bool = JSON_OPTION) -> int:
    """Generate an ECDSA P-256 key pair in cosign's file format.

    The private key is sealed with a password (scrypt + NaCl secretbox, as
    `cosign generate-key-pair` writes it) read from $LEMONPACK_PASSWORD or prompted for.
    Existing files are never overwritten without --force.
    """
    from lemonpack.signing.keys import generate_key_pair, refuse_existing, write_key_pair

    if not force:  # fail before asking for a password
        refuse_existing(out)
    password = read_password(confirm=True, what=f"{out}.key")
    key_path, pub_path = write_key_pair(out, generate_key_pair(password), force=force)
    if json_out:
        print_json({"private_key": str(key_path), "public_key": str(pub_path)})
    else:
        console.print(f"private key written to {key_path}", markup=False)
        console.print(f"public key written to {pub_path}", markup=False)
    return 0


def _read_key_file(path: str) -> bytes:
    from lemonpack.files import read_user_file

    return read_user_file(path, "key file")


def load_private_key(path: str):
    """The private key of a cosign key file, opened with the password (see :func:`read_password`).
    A file that is no encrypted cosign private key (a ``cosign.pub`` given to ``--key`` of
    ``sign``, ``--sign`` or ``--attest``) is refused naming its PEM block before any password is
    asked for (:class:`~lemonpack.signing.keys.KeyFileError`)."""
    from lemonpack.signing.keys import decode_private_key, is_private_key_file

    data = _read_key_file(path)
    if not is_private_key_file(data):
        decode_private_key(data, b"", what=path)  # raises, naming the block type (or "not a PEM file")
    return decode_private_key(data, read_password(confirm=False, what=path), what=path)


def load_verification_key(path: str):
    """The public key for verification: a ``PUBLIC KEY`` PEM, or the public half of an
    encrypted cosign private key file (then the password is needed)."""
    from lemonpack.signing.keys import decode_public_key, is_private_key_file

    data = _read_key_file(path)
    if is_private_key_file(data):
        return load_private_key(path).public_key()
    return decode_public_key(data, what=path)


def _annotations(values: list[str] | None) -> dict[str, str]:
    out = {}
    for v in values or []:
        key, sep, val = v.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{v!r} is not KEY=VALUE", param_hint="--annotation")
        out[key] = val
    return out


@app.command("sign")
def sign(reference: str = typer.Argument(..., metavar="REF", help="HOST[:PORT]/REPO[:TAG|@sha256:...]"),
         key: str = typer.Option(..., "--key", metavar="PREFIX.key", help="Cosign private key file."),
         annotation: list[str] = typer.Option(None, "--annotation", "-a", metavar="KEY=VALUE",
                                              help="Put KEY=VALUE into the payload's 'optional' (repeatable)."),
         insecure: bool = INSECURE_OPTION,
         registry_config: Path = REGISTRY_CONFIG_OPTION,
         json_out: bool = JSON_OPTION) -> int:
    """Sign an image in a registry (cosign's key-based format).

    The simple-signing payload for the image's manifest digest is signed with ECDSA P-256
    and pushed as a layer of the manifest tagged sha256-<hex>.sig next to the image;
    signatures already there are kept. The key password comes from $LEMONPACK_PASSWORD
    or a prompt.
    """
    from lemonpack.signing.remote import sign_image

    notes = _annotations(annotation)
    private = load_private_key(key)
    done = sign_image(reference, private, insecure=insecure, annotations=notes, registry_config=registry_config)
    if json_out:
        print_json(done)
    else:
        console.print(f"signed {done['reference']} -> {done['signature_tag']} "
                      f"({done['signatures']} signature(s))", markup=False)
    return 0


@app.command("verify")
def verify(reference: str = typer.Argument(..., metavar="REF", help="HOST[:PORT]/REPO[:TAG|@sha256:...] (with "
                                                                     "--attestation also oci:DIR:TAG)"),
           key: str = typer.Option(..., "--key", metavar="KEY",
                                   help="A public key PEM (cosign.pub) or a cosign private key file."),
           attestation: bool = typer.Option(False, "--attestation",
                                            help="Verify the image's attestations (sha256-<hex>.att: DSSE "
                                                 "envelopes of in-toto statements) instead of its signatures; "
                                                 "REF may also be oci:DIR:TAG, a layout build --attest wrote."),
           predicate: str = typer.Option(None, "--type", metavar="slsaprovenance|spdx|URI",
                                         help="With --attestation: only attestations of this predicate type "
                                              "(at least one must be there)."),
           insecure: bool = INSECURE_OPTION,
           registry_config: Path = REGISTRY_CONFIG_OPTION,
           json_out: bool = JSON_OPTION) -> int:
    """Verify an image's cosign signatures (or, with --attestation, its attestations) against a key.

    Succeeds when a signature under sha256-<hex>.sig verifies with the key and its payload
    names the image's manifest digest. Exits 3 naming why otherwise: no signature, wrong key
    or changed payload/annotation, or a payload for another image. With --attestation, every
    envelope under sha256-<hex>.att (of --type, when given) must verify with the key, carry an
    in-toto statement (payloadType application/vnd.in-toto+json) and name the image's digest
    as a subject; exit 3 naming the envelope and why otherwise.
    """
    if predicate is not None and not attestation:
        raise typer.BadParameter("--type applies with --attestation", param_hint="--type")
    if reference.startswith("oci:") and not reference.startswith("oci://") and not attestation:
        raise typer.BadParameter(f"{reference}: signatures are verified in a registry only; in a layout "
                                 "(oci:DIR:TAG) verify checks the attestations build --attest wrote: add "
                                 "--attestation", param_hint="REF")
    public = load_verification_key(key)
    if attestation:
        from lemonpack.signing.attestations import predicate_type_uri, verify_attestations

        uri = predicate_type_uri(predicate) if predicate is not None else None
        done = verify_attestations(reference, public, predicate_type=uri, insecure=insecure,
                                   registry_config=registry_config)
        if json_out:
            print_json(done)
        else:
            kinds = ", ".join(sorted({v["predicate_type"] for v in done["verified"]}))
            console.print(f"verified {done['reference']}: {len(done['verified'])} attestation(s) valid with "
                          f"{key} ({kinds})", markup=False)
        return 0
    from lemonpack.signing.remote import verify_image

    done = verify_image(reference, public, insecure=insecure, registry_config=registry_config)
    if json_out:
        print_json(done)
    else:
        console.print(f"verified {done['reference']}: {len(done['verified'])} of {done['checked']} "
                      f"signature(s) valid with {key}", markup=False)
    return 0


@app.command("load")
def load(source: str = typer.Argument(..., metavar="DIR:TAG", help="An OCI layout written by `lemonpack build` "
                                                                     "and the tag of an image in it."),
         engine: str = typer.Option("podman", "--engine", help="podman or docker."),
         url: str = typer.Option(None, "--url", metavar="URL",
                                 help="The engine's API socket (unix:///... or tcp://...). podman default: a "
                                      "`podman system service` started for this command; docker default: "
                                      "$DOCKER_HOST."),
         name: str = typer.Option(None, "--name", metavar="REPOSITORY",
                                  help="Tag the image as REPOSITORY:TAG (default: the name a full layout tag "
                                       "such as docker.io/x/a:1 carries, else localhost/lemonpack/<DIR name>)."),
         json_out: bool = JSON_OPTION) -> int:
    """Load an image of a built OCI layout into podman or Docker, keeping its digest.

    Every blob is verified first; afterwards the engine's image ID must equal the layout's
    config digest. Prints NAME@sha256:<manifest digest>, the reference to run it by.
    """
    from lemonpack.oci.layout_reader import split_layout_arg
    from lemonpack.builder.load import ENGINES, load_image

    if engine not in ENGINES:
        raise typer.BadParameter(f"{engine!r} is not one of {', '.join(ENGINES)}", param_hint="--engine")
    directory, tag = split_layout_arg(source)
    if not tag:
        raise typer.BadParameter("give the image's tag: DIR:TAG", param_hint="DIR:TAG")
    done = load_image(directory, tag, engine=engine, url=url, name=name)
    if json_out:
        print_json(done)
    else:
        console.print(f"loaded {directory}:{tag} into {engine}: {done['name']}:{done['tag']} "
                      f"(image {done['image_id'][:19]}...)", markup=False)
        console.print(f"run it by digest: {done['reference']}", markup=False)
        from lemonpack.oci.base import built_without_base

        if built_without_base(Path(directory), tag):
            from lemonpack.cli._app import err_console

            err_console.print("note: built without --base, this image holds the engine's files only (no libc, no "
                              "interpreter): a dynamically linked or scripted engine does not start in it; rebuild "
                              "with --base REF to run it", markup=False)
    return 0


@app.command("uninstall")
def uninstall_cmd(recipe_ref: str = typer.Argument(..., metavar="RECIPE",
                                                   help="A recipe id (or recipe JSON file) that was installed."),
                  json_out: bool = JSON_OPTION) -> int:
    """Remove an installed recipe artifact (<cache>/external/<recipe>/) and its receipt.

    Refuses a recipe that comes from a system descriptor directory (the system's package
    manager owns it).
    """
    from lemonpack.builder.install import uninstall
    from lemonpack.runtime.recipes.discovery import recipe_id as named_recipe, refuse_system_descriptor

    recipe_id = named_recipe(recipe_ref)  # the file-or-id rule, without discovery
    refuse_system_descriptor(recipe_id)
    done = uninstall(recipe_id)
    if json_out:
        print_json(done)
    else:
        console.print(f"uninstalled {recipe_id}: removed {', '.join(done['removed'])}", markup=False)
    return 0
