"""The ``lemonpack`` command line (typer): argument parsing and printing only.

Every command is one call into a room. Errors of the :class:`~lemonpack.errors.LemonpackError`
family are caught once, in :func:`main`, and printed without a traceback (as JSON on
stdout when ``--json`` was given); the process exits with the error's ``exit_code``.
Command groups live in sibling modules and register themselves on :data:`app`.
"""

from __future__ import annotations

import json
import logging
import sys

import typer
from rich.markup import escape

from lemonpack.cli._app import app, console, err_console
from lemonpack.cli import build_cmds, cache_cmds, contract_cmds  # noqa: F401  (register commands)
from lemonpack.cli import release_cmds  # noqa: F401  (register commands)
from lemonpack.cli import registry_cmds  # noqa: F401  (publish, pull, pin)
from lemonpack.errors import LemonpackError

for _name in ("backends_cmds", "models_cmds", "run_cmds", "select_cmds", "serve_cmds", "extensions_cmds",
              "signing_cmds", "catalogue_cmds"):
    try:  # command groups of rooms still being built register themselves when present
        __import__(f"lemonpack.cli.{_name}")
    except ModuleNotFoundError as _e:  # pragma: no cover
        if _e.name != f"lemonpack.cli.{_name}":
            raise


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
    want_json = "--json" in args
    handler = StderrLogHandler(logging.WARNING)
    logger = logging.getLogger("lemonpack")
    logger.addHandler(handler)
    try:
        return _main(args, want_json, argv is None)
    finally:
        logger.removeHandler(handler)


def _main(args: list[str], want_json: bool, exit_process: bool) -> int:
    try:
        result = app(args=args, prog_name="lemonpack", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except LemonpackError as e:
        if want_json:
            print(json.dumps(e.to_json()), flush=True)  # one line: scripts read it as an event
        else:
            err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, markup=True, soft_wrap=True)
        code = e.exit_code
    except typer.Exit as e:
        code = e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("aborted")
        code = 130
    except Exception as e:
        # Usage errors of typer's (vendored) click: they know how to print themselves.
        if not (hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int)):
            raise
        e.show()
        code = e.exit_code
    if exit_process:
        sys.exit(code)
    return code


__all__ = ["app", "console", "main"]
