"""``lemonpack keygen`` / ``sign`` / ``verify`` (cosign's key-based format), ``load`` (into
podman or Docker), ``uninstall``; ``install oci://`` is reached through ``lemonpack install``."""

from __future__ import annotations

import os
import sys

import typer

from lemonpack.cli._app import JSON_OPTION, app, console, print_json
from lemonpack.errors import LemonpackError

PASSWORD_ENV = "LEMONPACK_PASSWORD"
INSECURE_OPTION = typer.Option(False, "--insecure",
                               help="Allow plain HTTP to a registry that is not on a loopback address.")


def read_password(*, confirm: bool, what: str) -> bytes:
    """The key password: ``$LEMONPACK_PASSWORD`` when set (may be empty), else a hidden
    prompt on the terminal (twice when ``confirm``). Never taken from the command line.
    Raises LemonpackError when neither is available (no terminal)."""
    env = os.environ.get(PASSWORD_ENV)
    if env is not None:
        return env.encode("utf-8")
    if not sys.stdin.isatty():
        raise LemonpackError(f"no password for {what}: set {PASSWORD_ENV} or run on a terminal")
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
    from lemonpack.signing.keys import generate_key_pair, write_key_pair

    if not force:  # fail before asking for a password
        existing = [p for p in (out + ".key", out + ".pub") if os.path.lexists(p)]
        if existing:
            raise LemonpackError(f"{', '.join(existing)} already exist(s); refusing to overwrite (use --force)")
    password = read_password(confirm=True, what=f"{out}.key")
    key_path, pub_path = write_key_pair(out, generate_key_pair(password), force=force)
    if json_out:
        print_json({"private_key": str(key_path), "public_key": str(pub_path)})
    else:
        console.print(f"private key written to {key_path}", markup=False)
        console.print(f"public key written to {pub_path}", markup=False)
    return 0
