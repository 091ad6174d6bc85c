"""``lemonpack --help`` and ``--version`` print stored pages without importing typer
(lemonpack.cli._print_static_page): they must be byte for byte what typer renders, on every
terminal width the stored page is used for, and typer must still render the page on a
narrower terminal."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

STORED = ("import sys\n"
          "from lemonpack.cli import main\n"
          "rc = main(sys.argv[1:])\n"
          "sys.stdout.flush()\n"
          "sys.stderr.write('typer imported: %s' % ('typer' in sys.modules))\n"
          "sys.exit(rc)\n")
TYPER = ("import sys\n"
         "from lemonpack.cli import load_commands\n"
         "load_commands(sys.argv[1:])(args=sys.argv[1:], prog_name='lemonpack', standalone_mode=False)\n")


def _out(code: str, argv: list[str], columns: int) -> tuple[str, str]:
    env = {**os.environ, "COLUMNS": str(columns)}
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


@pytest.mark.parametrize("columns", [80, 200])
def test_the_stored_root_help_is_what_typer_renders(columns):
    stored, how = _out(STORED, ["--help"], columns)
    rendered, _ = _out(TYPER, ["--help"], columns)
    assert how.endswith("typer imported: False"), how  # the stored page was printed
    assert stored == rendered, ("lemonpack/cli/_root_help.py is stale: run python3 scripts/root_help.py\n"
                                f"stored:\n{stored}\ntyper:\n{rendered}")


def test_a_narrow_terminal_gets_typer_s_rendering():
    page, how = _out(STORED, ["--help"], 60)
    assert how.endswith("typer imported: True"), how
    assert page == _out(TYPER, ["--help"], 60)[0]
    assert page != _out(STORED, ["--help"], 80)[0]  # the width matters: the stored page would be wrong here


def test_version_is_what_typer_prints():
    stored, how = _out(STORED, ["--version"], 80)
    assert how.endswith("typer imported: False"), how
    assert stored == _out(TYPER, ["--version"], 80)[0]
    assert stored.startswith("lemonpack ") and stored.endswith("\n")


def test_other_command_lines_are_typer_s():
    """Only the exact command lines are stored pages: ``--help --version`` or a command's help go to typer."""
    for argv in (["catalogue", "--help"], ["--version", "--help"]):
        _, how = _out(STORED, argv, 80)
        assert how.endswith("typer imported: True"), (argv, how)
