"""The shared typer application and consoles (kept apart to avoid import cycles)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

if TYPE_CHECKING:
    from lemonpack.contract import Recipe

#: Help pages are click's plain ones (``rich_markup_mode=None`` on every Typer of the CLI):
#: typer's rich panels (typer 0.29) print a type column for flags too (``--json <bool>``),
#: suggesting a value the flag does not take. Plain help lists flags bare.
HELP_MARKUP = None

app = typer.Typer(
    name="lemonpack",
    rich_markup_mode=HELP_MARKUP,
    help="Reproducible, verifiable, runnable out-of-tree inference engines: "
    "lint recipes, build them into OCI layouts and Nix expressions, run them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from lemonpack import __version__

        typer.echo(f"lemonpack {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print lemonpack's version and exit.")) -> None:
    """Reproducible, verifiable, runnable out-of-tree inference engines: lint recipes, build
    them into OCI layouts and Nix expressions, run them."""
    # A callback keeps ``lemonpack`` a group of commands even when only one command module
    # is loaded (lemonpack.cli.load_commands): typer runs a lone command as the app itself.


def _width(stream) -> int | None:
    """Terminal width for a terminal; unlimited (no wrapping mid-path) when piped."""
    return None if stream.isatty() else 4096


console = Console(highlight=False, soft_wrap=True, width=_width(sys.stdout))
err_console = Console(stderr=True, highlight=False, soft_wrap=True, width=_width(sys.stderr))

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON on stdout.")
#: Every command that talks to a registry takes these two (publish, pull, pin, sign, verify,
#: install oci://, catalogue build): one definition, so help and behaviour stay the same.
INSECURE_OPTION = typer.Option(False, "--insecure",
                               help="Allow plain http to a registry that is not on this machine (loopback "
                                    "registries always use plain http).")
REGISTRY_CONFIG_OPTION = typer.Option(
    None, "--registry-config", metavar="FILE",
    help="Auth file to read first ({\"auths\": {HOST: {\"auth\": base64(user:pass)}}}); then "
         "$REGISTRY_AUTH_FILE and ~/.docker/config.json.")


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout (no rich markup)."""
    print(json.dumps(data, indent=2, sort_keys=True))


def confirm_install(yes: bool) -> None:
    """Ask "Install?" on the terminal unless ``yes``; raises LemonpackError (exit 1, nothing
    installed) when not confirmed, or when stdin is not a terminal and ``--yes`` was not given."""
    from lemonpack.errors import LemonpackError

    if yes:
        return
    if not sys.stdin.isatty():
        raise LemonpackError("refusing to install without confirmation on a non-interactive terminal; "
                             "pass --yes")
    if not typer.confirm("Install?", default=False, err=True):
        raise LemonpackError("not confirmed; nothing installed")


def resolve_recipe(ref: str) -> "Recipe":
    """The recipe a command argument names: a path to a recipe JSON file, or the id of a
    recipe discovery loads (``lemonpack backends list``).

    ``ref`` is a file when it names an existing file; when it does not and looks like a
    path (ends with ``.json`` or contains a path separator) the error is "recipe file not
    found: REF". Otherwise it is a recipe id, looked up with a fresh discovery scan; an id
    that only rejected descriptors carry (their recipe id, or for descriptors that were
    never parsed, e.g. untrusted ones, their file name ``ID.json``/``ID_WITH_UNDERSCORES.json``)
    is an error saying where it was found and why it was rejected. Raises
    :class:`~lemonpack.errors.LemonpackError` (a :class:`~lemonpack.errors.ManifestError`
    for an invalid file); never returns None.
    """
    import os
    from pathlib import Path

    from lemonpack.contract import load_recipe
    from lemonpack.errors import LemonpackError

    path = Path(ref)
    if path.is_file():
        return load_recipe(path)
    if ref.endswith(".json") or "/" in ref or os.sep in ref:
        if path.exists():
            raise LemonpackError(f"recipe file {ref} is not a regular file")
        raise LemonpackError(f"recipe file not found: {ref}")
    from lemonpack.runtime.discovery import Discovery, search_path

    result = Discovery().scan()
    found = result.recipes.get(ref)
    if found is not None:
        return found.recipe
    for r in result.errors:
        if r.recipe == ref or (r.recipe is None and r.file.stem in (ref, ref.replace("-", "_"))):
            raise LemonpackError(f"{ref} was found at {r.file} but rejected: {r.kind}: {r.reason} "
                                 f"— see lemonpack backends list --all")
    known = ", ".join(result.recipes) or "none"
    dirs = ", ".join(str(d.path) for d in search_path()) or "no directories"
    raise LemonpackError(f"no recipe file or discovered recipe named {ref!r} (discovered: {known}; "
                         f"searched: {dirs})")
