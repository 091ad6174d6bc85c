"""The shared typer application and consoles (kept apart to avoid import cycles)."""

from __future__ import annotations

import json
import sys
from json.encoder import encode_basestring_ascii as _encode_str  # the C one json.dumps uses
from typing import TYPE_CHECKING, Any, cast

import typer

if TYPE_CHECKING:
    from rich.console import Console

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


def _refuse_empty(param: Any) -> None:
    """Wrap ``param``'s type conversion so ``''`` is a usage error naming the parameter. The
    type is copied first: click's ``STRING`` (a ``str`` option's type) is one instance shared by
    every ``str`` parameter, which must keep accepting ``''``."""
    import copy

    from typer._click.exceptions import UsageError  # typer (0.28) vendors click: its UsageError prints itself

    param.type = copy.copy(param.type)
    convert = param.type.convert

    def checked(value: Any, p: Any, ctx: Any) -> Any:
        if isinstance(value, str) and not value:
            shown = p.opts[0] if getattr(p, "opts", None) and p.param_type_name == "option" else (
                p.human_readable_name if p is not None else "a path")
            raise UsageError(f"{shown} is empty", ctx)
        return convert(value, p, ctx)

    param.type.convert = checked
    param.type._lemonpack_non_empty = True


def refuse_empty_paths(command: Any) -> Any:
    """Make every path parameter of ``command`` (typer's click command) and its subcommands (a
    ``pathlib.Path`` parameter, and any ``--out``) refuse ``''`` as a usage error (exit 2:
    ``--out is empty``) instead of reading it as ``Path('.')``, the current directory; returns
    ``command``."""
    from typer.models import TyperPath

    for param in command.params:
        is_out = "--out" in getattr(param, "opts", ()) and param.param_type_name == "option"
        if (isinstance(param.type, TyperPath) or is_out) and not getattr(param.type, "_lemonpack_non_empty", False):
            _refuse_empty(param)
    for sub in getattr(command, "commands", {}).values():
        refuse_empty_paths(sub)
    return command


def _width(stream) -> int | None:
    """Terminal width for a terminal; unlimited (no wrapping mid-path) when piped."""
    return None if stream.isatty() else 4096


class _LazyConsole:
    """A rich ``Console`` (no highlighting, soft wrap, :func:`_width`) made on first use: rich
    costs about a fifth of a quick command's start-up (``--help``, ``catalogue search``,
    ``--version`` print through plain ``typer.echo``/``print`` and never need it). Every
    attribute is the real console's."""

    def __init__(self, stderr: bool) -> None:
        object.__setattr__(self, "_stderr", stderr)
        object.__setattr__(self, "_console", None)

    def _real(self) -> Any:
        if self._console is None:
            from rich.console import Console

            stream = sys.stderr if self._stderr else sys.stdout
            object.__setattr__(self, "_console", Console(stderr=self._stderr, highlight=False, soft_wrap=True,
                                                         width=_width(stream)))
        return self._console

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """``Console.print``; one plain string with ``markup=False`` (and at most
        ``highlight``/``soft_wrap``) written as it is, without making the console when none
        is made yet: what rich would write for it (no markup, no highlighting, no wrapping:
        the console soft-wraps; nor rich's ``:name:`` emoji codes, which a reference such as
        ``host/a:smile:b`` is not meant to have), minus rich's ~3 MiB and ~25 ms on commands that print one
        result line (``pull``, ``publish``)."""
        if (self._console is None and len(objects) == 1 and isinstance(objects[0], str)
                and kwargs.get("markup", True) is False and set(kwargs) <= {"markup", "highlight", "soft_wrap"}):
            stream = sys.stderr if self._stderr else sys.stdout
            stream.write(objects[0] + "\n")
            stream.flush()
            return
        self._real().print(*objects, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._real(), name, value)


# cast: the proxy forwards every attribute to the Console it makes, so callers type-check against Console.
console = cast("Console", _LazyConsole(stderr=False))
err_console = cast("Console", _LazyConsole(stderr=True))

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON on stdout.")
#: Every command that talks to a registry takes these two (publish, pull, pin, sign, verify,
#: install oci://, catalogue build): one definition, so help and behaviour stay the same.
INSECURE_OPTION = typer.Option(False, "--insecure",
                               help="Speak plain http to the registry this command names, with no TLS attempt "
                                    "(as insecure = true for it in containers-registries.conf(5) says). "
                                    "--insecure REGISTRY (HOST[:PORT], repeatable; or --insecure=REGISTRY) says "
                                    "it of that registry only, wherever the command meets it. Without "
                                    "it TLS is tried first, loopback registries too (one answering in plain "
                                    "http is then used in plain http, said on stderr).")
REGISTRY_CONFIG_OPTION = typer.Option(
    None, "--registry-config", metavar="FILE",
    help="Auth file to read first ({\"auths\": {HOST[/NAMESPACE]: {\"auth\": base64(user:pass)}}}); then "
         "$REGISTRY_AUTH_FILE, the podman/skopeo login files (${XDG_RUNTIME_DIR}/containers/auth.json, "
         "~/.config/containers/auth.json) and Docker's ($DOCKER_CONFIG/config.json or ~/.docker/config.json).")

#: Every command that uses a registry image or model (policy check, pull, install oci://, run,
#: serve, kube generate) judges it with containers-policy.json(5) first (lemonpack.trust).
POLICY_OPTION = typer.Option(
    None, "--policy", metavar="FILE",
    help="Trust policy (containers-policy.json) to use instead of $HOME/.config/containers/policy.json, "
         "else /etc/containers/policy.json.")
REGISTRIES_D_OPTION = typer.Option(
    None, "--registries.d", metavar="DIR",
    help="containers-registries.d directory (use-sigstore-attachments) instead of "
         "$HOME/.config/containers/registries.d, else /etc/containers/registries.d.")

def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout (no rich markup): the bytes of
    ``json.dumps(data, indent=2, sort_keys=True)`` (:func:`print_json_text`)."""
    print(print_json_text(data))


class _NotPlain(Exception):
    pass


_SCALAR = {True: "true", False: "false", None: "null"}


def _print_indented(o: Any, pad: str) -> str:
    if type(o) is str:
        return _encode_str(o)
    if o is None or o is True or o is False:
        return _SCALAR[o]
    if isinstance(o, str):
        return _encode_str(o)
    if isinstance(o, dict):
        if not o:
            return "{}"
        if not all(type(k) is str for k in o):
            raise _NotPlain
        inner = pad + "  "
        parts = []
        for k in sorted(o):  # a plain string value (most of them) without a call of its own
            v = o[k]
            parts.append(f"{inner}{_encode_str(k)}: {_encode_str(v) if type(v) is str else _print_indented(v, inner)}")
        return "{\n" + ",\n".join(parts) + f"\n{pad}}}"
    if isinstance(o, (list, tuple)):
        if not o:
            return "[]"
        inner = pad + "  "
        return "[\n" + ",\n".join(inner + _print_indented(v, inner) for v in o) + f"\n{pad}]"
    if o is None or isinstance(o, (bool, int, float)):
        return json.dumps(o)
    raise _NotPlain


def print_json_text(data: Any) -> str:
    """``json.dumps(data, indent=2, sort_keys=True)``, the same text, made without the
    standard library's generator-per-value encoder (the indented form has no C encoder):
    about three times faster for a search printing 10,000 results. Falls back to
    ``json.dumps`` for what is not plain JSON data (non-string keys, other types), so it
    raises what that raises."""
    try:
        return _print_indented(data, "")
    except (_NotPlain, RecursionError):
        return json.dumps(data, indent=2, sort_keys=True)


def confirm_install(yes: bool) -> None:
    """Ask "Install?" on the terminal unless ``yes``; raises :class:`NotConfirmed` (exit 1, nothing
    installed) when not confirmed, or when stdin is not a terminal and ``--yes`` was not given."""
    from lemonpack.errors import NotConfirmed

    if yes:
        return
    if not sys.stdin.isatty():
        raise NotConfirmed("refusing to install without confirmation on a non-interactive terminal; "
                           "pass --yes")
    if not typer.confirm("Install?", default=False, err=True):
        raise NotConfirmed("not confirmed; nothing installed")
