"""The CLI stays thin: commands parse arguments and print; the rooms decide.

Two checks hold the line (docs/architecture.md, "every command one call into a room"):

1. The commands thinned into one call into a room (``run``, ``build``, ``install``,
   ``publish``) keep a bounded body (statements after the docstring; the parameter list is
   argument parsing and does not count). The bounds are the thinned sizes plus a few lines:
   a new rule inlined into a command (a second mirror check, a copied default, a retry loop)
   pushes it over and the test names the command.
2. ``lemonpack/cli/`` defines no module-level function other than the typer commands, the
   printing helpers (named ``_print*``/``print_*``) and :data:`ALLOWED` below, each with the
   reason it is still here. A new helper that decides something belongs in its room; one
   that only prints is named ``_print_...``. A stale entry (the helper moved out) fails too,
   so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[1] / "lemonpack" / "cli"

#: command -> (module, most body lines).
BOUNDS = {"run": ("run_cmds.py", 30), "build": ("build_cmds.py", 35), "install": ("build_cmds.py", 40),
          "publish": ("registry_cmds.py", 40), "serve": ("serve_cmds.py", 7)}

#: module-level helpers of cli/ that are neither commands nor printing helpers, and why they stay.
ALLOWED = {
    ("__init__.py", "load_commands"): "the entry point: imports the command modules a command line needs",
    ("__init__.py", "__getattr__"): "the entry point: lazy ``lemonpack.cli.app``",
    ("__init__.py", "main"): "the entry point: the one place errors become exit codes",
    ("__init__.py", "_main"): "the entry point: the one place errors become exit codes",
    ("__init__.py", "_report_interrupt"): "the entry point: prints the Ctrl-C message",
    ("_app.py", "_width"): "console set-up (terminal width)",
    ("_app.py", "refuse_empty_paths"): "argument parsing: every path parameter refuses '' (not read as .)",
    ("_app.py", "_refuse_empty"): "argument parsing: the check refuse_empty_paths installs",
    ("_app.py", "confirm_install"): "terminal interaction: asks the user",
    ("cache_cmds.py", "_size"): "formats a byte count for printing",
    ("cache_cmds.py", "_totals"): "sums what it prints",
    ("catalogue_cmds.py", "_password"): "terminal interaction: reads a password",
    ("catalogue_cmds.py", "_filters"): "argument parsing (KEY=VALUE filters)",
    ("catalogue_cmds.py", "_budget"): "argument parsing (a --memory-budget size)",
    ("extensions_cmds.py", "_features"): "argument parsing",
    ("extensions_cmds.py", "_run"): "wraps a room call into printing",
    ("extensions_cmds.py", "_ext_json"): "JSON shape for printing",
    ("extensions_cmds.py", "_rejected_json"): "JSON shape for printing",
    ("kube_cmds.py", "_sources"): "argument parsing (--models SPEC / MODEL=SPEC)",
    ("models_cmds.py", "_argument_of"): "argument parsing",
    ("models_cmds.py", "_pairs"): "argument parsing (KEY=VALUE)",
    ("registry_cmds.py", "_client"): "opens the registry client the command's options name",
    ("registry_cmds.py", "_show_progress"): "terminal detection for progress bars",
    ("signing_cmds.py", "read_password"): "terminal interaction: reads a password",
    ("signing_cmds.py", "_read_key_file"): "reads the key file an option names",
    ("signing_cmds.py", "load_private_key"): "key option -> key (password prompt)",
    ("signing_cmds.py", "load_verification_key"): "key option -> key",
    ("signing_cmds.py", "_annotations"): "argument parsing (KEY=VALUE annotations)",
}


def _is_command(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
               and d.func.attr in ("command", "callback") for d in fn.decorator_list)


def _functions():
    for path in sorted(CLI.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                yield path.name, node


def _body_lines(fn: ast.FunctionDef) -> int:
    body = fn.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1:
        body = body[1:]
    return fn.end_lineno - body[0].lineno + 1


@pytest.mark.parametrize("command", sorted(BOUNDS))
def test_thinned_commands_stay_short(command):
    module, most = BOUNDS[command]
    found = [fn for name, fn in _functions() if name == module and fn.name == command and _is_command(fn)]
    assert found, f"command {command} not found in lemonpack/cli/{module}"
    lines = _body_lines(found[0])
    assert lines <= most, (f"lemonpack/cli/{module}: {command} has {lines} body lines (bound {most}); "
                           f"move the new decision into its room and call it")


def test_cli_defines_no_deciding_helpers_beyond_the_allowlist():
    helpers = {(name, fn.name) for name, fn in _functions()
               if not _is_command(fn) and not fn.name.startswith(("_print", "print_"))}
    new = sorted(helpers - set(ALLOWED))
    assert not new, (f"new helper(s) in lemonpack/cli/: {new}; a helper that decides belongs in its room "
                     "(docs/architecture.md), one that only prints is named _print_...")
    stale = sorted(set(ALLOWED) - helpers)
    assert not stale, f"allowlisted helpers no longer in lemonpack/cli/: {stale}; remove them from ALLOWED"


def test_the_checks_see_a_deciding_helper(tmp_path):
    """The checks are not vacuous: the walker finds this module's own non-command helper."""
    tree = ast.parse("import typer\napp = typer.Typer()\n@app.command()\ndef c():\n    '''d'''\n    return 1\n"
                     "def _decide(x):\n    return x\n")
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert [_is_command(f) for f in fns] == [True, False]
    assert _body_lines(fns[0]) == 1
