"""``lemonpack backends list``: the discovered recipe descriptors (RFC sections 8 and 10).

The search path is the one of :mod:`lemonpack.runtime.discovery` (``LEMONPACK_BACKENDS_PATH``
replaces it). ``--all`` adds the rejected and shadowed descriptors with their reasons;
``--json`` always prints both lists (``{"recipes": [...], "rejected": [...]}``).
"""

from __future__ import annotations

import typer
from rich.table import Table
from rich.text import Text

from lemonpack.cli._app import JSON_OPTION, app, console, err_console, print_json
from lemonpack.runtime.discovery import Discovery

backends_app = typer.Typer(help="External backend recipes found on this machine.", no_args_is_help=True)
app.add_typer(backends_app, name="backends")


@backends_app.command("list")
def backends_list(show_all: bool = typer.Option(False, "--all", help="Also list rejected and shadowed descriptors."),
                  json_out: bool = JSON_OPTION) -> int:
    """List discovered recipes: id, display name, kind, scope, file.

    Exit 0 even when some descriptors were rejected (a hint names how many; see --all).
    """
    result = Discovery().scan()
    if json_out:
        print_json(result.to_json())
        return 0
    table = Table(title="recipes", title_justify="left")
    for col in ("recipe", "display name", "kind", "scope", "file"):
        table.add_column(col, overflow="fold")
    for d in result.recipes.values():
        kind = d.kind + (f" (extends {' -> '.join(d.extends_chain)})" if d.extends_chain else "")
        table.add_row(*(Text(x) for x in (d.id, d.recipe.display_name, kind, d.scope, str(d.file))))
    if result.recipes:
        console.print(table)
    else:
        console.print("no external recipes found")
    if show_all and result.rejected:
        rej = Table(title="rejected and shadowed", title_justify="left")
        for col in ("file", "kind", "scope", "reason"):
            rej.add_column(col, overflow="fold")
        for r in result.rejected:
            rej.add_row(*(Text(x) for x in (str(r.file), r.kind, r.scope, r.reason)))
        console.print(rej)
    elif result.errors:
        n = len(result.errors)
        err_console.print(f"{n} descriptor{'s' if n != 1 else ''} rejected; run 'lemonpack backends list --all'"
                          f" to see why", markup=False)
    return 0
