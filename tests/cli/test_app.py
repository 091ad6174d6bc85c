"""Every ``--help`` page of the CLI, walked from the real command tree: flags are listed
bare (a flag takes no value, so ``--json <bool>`` would tell the user to type one), and
``build --help`` says what ``--example`` really does."""

from __future__ import annotations

import json

import pytest
import typer

from lemonpack.cli import app, main


def _command_paths() -> list[list[str]]:
    """Every command path of the CLI, the root included (``[]``, ``["models", "add"]``, ...)."""
    def walk(cmd, path):
        yield path
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            yield from walk(sub, [*path, name])
    return list(walk(typer.main.get_command(app), []))


def _help(path: list[str], capsys) -> str:
    capsys.readouterr()
    assert main([*path, "--help"]) == 0
    return capsys.readouterr().out


def test_the_walk_sees_every_command():
    paths = {" ".join(p) for p in _command_paths()}
    assert {"build", "install", "run", "lint", "models add", "backends list", "schema check"} <= paths


def test_no_help_page_shows_a_value_for_a_flag(capsys):
    for path in _command_paths():
        page = _help(path, capsys)
        assert "--help" in page, path
        assert "<bool>" not in page, f"lemonpack {' '.join(path)} --help:\n{page}"
        for line in page.splitlines():
            if line.strip().startswith(("--json", "--yes", "-y,", "--help", "--example")):
                assert "<" not in line.split("  ")[0], f"{path}: {line!r}"


def test_build_help_says_example_builds_the_example_alone(capsys):
    page = " ".join(_help(["build"], capsys).split())
    assert "Also build" not in page
    assert "--example Build only lemonpack's shipped example" in page


def test_a_plain_line_is_printed_as_rich_would_without_loading_rich():
    """_LazyConsole.print's plain path (pull and publish print one line): the same text rich's
    console writes for it, and rich is not imported; markup still goes through rich."""
    import subprocess
    import sys

    line = "127.0.0.1:5000/bench/app:v1 -> new layout /tmp/x y (tag v1, sha256:" + "a" * 64 + ", 3 blobs)"
    code = ("import sys\nfrom lemonpack.cli._app import console, err_console\n"
            f"console.print({line!r}, markup=False)\nerr_console.print('to stderr', markup=False)\n"
            "assert 'rich' not in sys.modules\n"
            "console.print('[bold]marked[/]', markup=True)\nassert 'rich' in sys.modules\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == line + "\nmarked\n" and r.stderr == "to stderr\n"
    rich_says = subprocess.run([sys.executable, "-c", (
        "import sys\nfrom rich.console import Console\n"
        f"Console(highlight=False, soft_wrap=True, width=4096).print({line!r}, markup=False)\n")],
        capture_output=True, text=True, timeout=60)
    assert rich_says.stdout == line + "\n"


@pytest.mark.parametrize("data", [{}, [], "x", 1, None, True, 2.5, [[[]]], {"b": {"c": {}, "d": []}, "a": [1, -0.0, 1e100]},
                                  {"r": [{"id": "recipe:x", "display_name": "é\n\"\u2028", "official": False,
                                          "publisher": None}] * 3, "q": ""}, {1: 2}])
def test_indented_json_is_the_standard_librarys_text(data):
    from lemonpack.cli._app import print_json_text

    assert print_json_text(data) == json.dumps(data, indent=2, sort_keys=True)
