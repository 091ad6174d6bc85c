"""The shared typer application and consoles (kept apart to avoid import cycles)."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console

app = typer.Typer(
    name="lemonpack",
    help="Reproducible, verifiable, runnable out-of-tree inference engines: "
    "lint recipes, build them into OCI layouts and Nix expressions, run them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON on stdout.")


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout (no rich markup)."""
    print(json.dumps(data, indent=2, sort_keys=True))
