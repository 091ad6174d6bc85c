"""The ``lemonpack`` command line (typer): argument parsing and printing only.

Every command is one call into a room. Errors of the :class:`~lemonpack.errors.LemonpackError`
family are caught once, in :func:`main`, and printed without a traceback (as JSON on
stdout when ``--json`` was given); the process exits with the error's ``exit_code``.
Command groups live in sibling modules and register themselves on :data:`app`.
"""

from __future__ import annotations

import logging
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import typer

# typer, rich and the command modules are imported only when a command line needs them:
# ``lemonpack --help`` and ``--version`` print a stored page (:func:`_print_static_page`).

#: The modules holding the command groups; each registers its commands on ``app`` when imported.
COMMAND_MODULES = ("build_cmds", "cache_cmds", "contract_cmds", "backends_cmds", "models_cmds", "run_cmds",
                   "select_cmds", "serve_cmds", "extensions_cmds", "probe_cmds", "release_cmds", "registry_cmds",
                   "signing_cmds", "catalogue_cmds", "kube_cmds", "policy_cmds")
#: Which module registers each top-level command or group, so that ``lemonpack catalogue
#: search ...`` imports one module rather than all of them (start-up time is most of a
#: quick command's time). tests/cli/test_cli.py checks it against what the
#: modules really register; a command missing here still works (everything is imported).
COMMAND_INDEX = {
    "build": "build_cmds", "install": "build_cmds", "unpack": "build_cmds", "cache": "cache_cmds", "lint": "contract_cmds",
    "host": "contract_cmds", "schema": "contract_cmds", "backends": "backends_cmds", "models": "models_cmds",
    "run": "run_cmds", "select": "select_cmds", "serve": "serve_cmds", "extensions": "extensions_cmds",
    "diagnose": "extensions_cmds", "probe": "probe_cmds", "release": "release_cmds", "publish": "registry_cmds",
    "pull": "registry_cmds", "pin": "registry_cmds", "keygen": "signing_cmds", "sign": "signing_cmds",
    "verify": "signing_cmds", "load": "signing_cmds", "uninstall": "signing_cmds", "catalogue": "catalogue_cmds",
    "kube": "kube_cmds", "policy": "policy_cmds",
}


def load_commands(args: list[str] | None = None) -> typer.Typer:
    """Import the command modules ``args`` needs and return the app: only the module of
    the command ``args`` names (its first word not starting with ``-``) when
    :data:`COMMAND_INDEX` knows it, none for ``--version`` alone (the root's eager option
    prints and exits before any command is looked at), else all of them (``--help``, a typo).
    The modules import their rooms inside the commands, so importing all of them for
    ``--help`` stays cheap (docs/architecture.md, "Start-up")."""
    from lemonpack.cli._app import app as root

    args = list(args or ())
    word = next((a for a in args if not a.startswith("-")), None)
    if word is None and set(args) == {"--version"}:
        return root
    for name in (COMMAND_INDEX[word],) if word in COMMAND_INDEX else COMMAND_MODULES:
        __import__(f"lemonpack.cli.{name}")
    return root


def __getattr__(name: str):
    if name == "app":  # ``from lemonpack.cli import app``: the app with every command
        return load_commands()
    if name in ("console", "err_console"):
        from lemonpack.cli import _app

        return getattr(_app, name)
    raise AttributeError(name)


class StderrLogHandler(logging.Handler):
    """Log records of the ``lemonpack`` loggers (warnings and above: a dropped cache entry,
    a failed container clean-up) as ``lemonpack: warning: ...`` lines on the *current*
    ``sys.stderr``, never on stdout where ``--json`` output goes. Records marked ``listed``
    (rejected descriptors, which the commands list themselves) are skipped."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "listed", False):
            return
        try:
            msg = record.getMessage()
            if record.exc_info:
                msg += "\n" + logging.Formatter().formatException(record.exc_info)
            sys.stderr.write(f"lemonpack: {record.levelname.lower()}: {msg}\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            self.handleError(record)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns (and exits with) the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if _print_static_page(args):
        if argv is None:
            sys.exit(0)
        return 0
    want_json = "--json" in args
    handler = StderrLogHandler(logging.WARNING)
    logger = logging.getLogger("lemonpack")
    logger.addHandler(handler)
    ctrl_c = _CtrlC()
    try:
        with ctrl_c:
            return _main(args, want_json, argv is None, ctrl_c)
    finally:
        logger.removeHandler(handler)


class _CtrlC:
    """Notes that SIGINT came (then raises KeyboardInterrupt, as Python's default handler does)
    while a command runs: typer (0.29) turns a KeyboardInterrupt into a plain exit code 130,
    which :func:`_main` can then tell from a command returning 130 and report. Installed only
    in the main thread over Python's default handler; a command that handles SIGINT itself
    (``run``, ``serve``: :class:`~lemonpack.runtime.lifecycle.stop_signals.StopSignals`) replaces it for its
    own time."""

    def __init__(self) -> None:
        self.seen = False
        self._old: Callable[[int, FrameType | None], Any] | int | None = None

    def __enter__(self) -> "_CtrlC":
        import signal
        import threading

        if threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            import signal

            signal.signal(signal.SIGINT, self._old)

    def _handle(self, signum, frame) -> None:
        self.seen = True
        raise KeyboardInterrupt


def _print_static_page(args: list[str]) -> bool:
    """Print what ``lemonpack --version`` or ``lemonpack --help`` prints, without importing
    typer or a command module (most of their start-up); False for any other command line,
    and for ``--help`` on a terminal narrower than 80 columns (click wraps the page to the
    terminal up to 80 columns: typer renders it then). The root help page is stored in
    :mod:`lemonpack.cli._root_help` (``python3 scripts/root_help.py`` writes it;
    tests/cli/test_root_help.py fails when it is not what typer renders)."""
    if args == ["--version"]:
        from lemonpack import __version__

        page = f"lemonpack {__version__}\n"
    elif args == ["--help"]:
        import shutil

        if shutil.get_terminal_size().columns < 80:
            return False
        from lemonpack.cli._root_help import ROOT_HELP

        page = ROOT_HELP
    else:
        return False
    try:
        sys.stdout.write(page)
        sys.stdout.flush()
    except OSError:  # a closed pipe: typer's path meets it again and reports it as for any command
        return False
    return True


def _main(args: list[str], want_json: bool, exit_process: bool, ctrl_c: "_CtrlC") -> int:
    import json

    import typer

    from lemonpack.cli._app import err_console
    from lemonpack.errors import LemonpackError, StorageError

    try:
        if any(a == "--insecure" or a.startswith("--insecure=") for a in args):
            from lemonpack.registry.registries_conf import take_insecure_registries

            args = take_insecure_registries(args)  # --insecure REGISTRY: declared for every client
        from typer.main import get_command

        from lemonpack.cli._app import refuse_empty_paths

        command = refuse_empty_paths(get_command(load_commands(args)))  # ``--out ''`` is not ``.``
        result = command(args=args, prog_name="lemonpack", standalone_mode=False)
        code = result if isinstance(result, int) else 0
        if code == 130 and ctrl_c.seen:  # typer (0.29) turned Ctrl-C into Exit(130), silently
            code = _report_interrupt(args, want_json)
    except (LemonpackError, OSError) as e:
        if isinstance(e, OSError):  # a refusal of the disk or system no command named: still one line
            e = StorageError(f"{e.filename}: {e.strerror or e}" if e.filename else str(e.strerror or e))
        if want_json:
            print(json.dumps(e.to_json()), flush=True)  # one line: scripts read it as an event
        else:
            from rich.markup import escape

            label = "aborted:" if e.exit_code == 130 else "[bold red]error:[/]"
            err_console.print(f"{label} {escape(str(e))}", highlight=False, markup=True, soft_wrap=True)
        code = e.exit_code
    except typer.Exit as e:
        code = e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        code = _report_interrupt(args, want_json)
    except Exception as e:
        # Usage errors of typer's (vendored) click: they know how to print themselves.
        exit_code = getattr(e, "exit_code", None)
        if not (hasattr(e, "show") and isinstance(exit_code, int)):
            raise
        e.show()
        code = exit_code
    if exit_process:
        import gc

        # The process ends here: the interpreter's last collections need not walk every object
        # the imports made (about a fifth of a quick command's CPU time). atexit handlers and
        # ``weakref.finalize`` still run; Python never promised ``__del__`` of cyclic garbage
        # at exit anyway.
        gc.freeze()
        sys.exit(code)
    return code


def _report_interrupt(args: list[str], want_json: bool) -> int:
    """Say that Ctrl-C stopped the command (a command that knows what it left behind raises
    :class:`~lemonpack.errors.Interrupted` with that instead); returns 130."""
    import json

    from rich.markup import escape

    from lemonpack.cli._app import err_console
    from lemonpack.errors import Interrupted

    word = next((a for a in args if not a.startswith("-")), "")
    e = Interrupted(f"lemonpack {word} interrupted (Ctrl-C)".replace("  ", " "))
    if want_json:
        print(json.dumps(e.to_json()), flush=True)
    else:
        err_console.print(f"aborted: {escape(str(e))}", highlight=False, markup=True, soft_wrap=True)
    return e.exit_code


__all__ = ["app", "console", "main"]
