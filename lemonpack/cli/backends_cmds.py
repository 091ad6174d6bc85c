"""``lemonpack backends list``: the discovered recipe descriptors (RFC sections 8 and 10).

The search path is the one of :mod:`lemonpack.runtime.recipes.discovery` (``LEMONPACK_BACKENDS_PATH``
replaces it). ``--all`` adds the rejected and shadowed descriptors with their reasons;
``--json`` always prints both lists (``{"recipes": [...], "rejected": [...]}``).
"""

from __future__ import annotations

import typer

from lemonpack.cli._app import HELP_MARKUP, JSON_OPTION, app, console, err_console, print_json

backends_app = typer.Typer(rich_markup_mode=HELP_MARKUP,
                         help="External backend recipes found on this machine.", no_args_is_help=True)
app.add_typer(backends_app, name="backends")


@backends_app.command("list")
def backends_list(show_all: bool = typer.Option(False, "--all", help="Also list rejected and shadowed descriptors."),
                  json_out: bool = JSON_OPTION) -> int:
    """List discovered recipes: id, display name, kind, scope, file.

    Exit 0 even when some descriptors were rejected (a hint names how many; see --all).

    \b
    Search path, highest priority first (*.json files in each directory):
      user:   $LEMONPACK_CONFIG_DIR/backends (default $XDG_CONFIG_HOME/lemonpack/backends),
              $XDG_CONFIG_HOME/lemonade/backends,
              $LEMONPACK_CACHE_DIR/backends (default $XDG_CACHE_HOME/lemonpack/backends),
              $XDG_CACHE_HOME/lemonade/backends
      system: /usr/share/lemonpack/backends, /etc/lemonpack/backends,
              /usr/share/lemonade-server/backends,
              /usr/local/share/lemonade-server/backends, /etc/lemonade/backends

    \b
    LEMONPACK_BACKENDS_PATH replaces the whole list: directories separated by ':',
    each written user:DIR, system:DIR or DIR (user scope), e.g.
      LEMONPACK_BACKENDS_PATH=user:$HOME/recipes:system:/opt/recipes
    An empty value searches no directory. User descriptors must belong to you, system
    ones to root; neither may be group or world writable.
    """
    from rich.table import Table
    from rich.text import Text

    from lemonpack.runtime.recipes.discovery import BACKENDS_PATH_ENV, Discovery

    discovery = Discovery()
    result = discovery.scan()
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
        import os

        dirs = "\n".join(f"  {d.scope}: {d.path}" for d in discovery.directories)
        if BACKENDS_PATH_ENV in os.environ:
            where = (f"in the directories {BACKENDS_PATH_ENV} names:\n{dirs}" if dirs
                     else f"({BACKENDS_PATH_ENV} is set but empty: no directory was searched)")
        else:
            where = (f"in the default search path (highest priority first; {BACKENDS_PATH_ENV} "
                     f"replaces it):\n{dirs}")
        console.print(f"no external recipes found {where}", markup=False)
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
