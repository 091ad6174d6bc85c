"""``lemonpack lint``, ``lemonpack host``, ``lemonpack schema check|lock``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from lemonpack.cli._app import HELP_MARKUP, JSON_OPTION, app, console, err_console, print_json
from lemonpack.errors import LemonpackError, Problem, one_line


@app.command()
def lint(files: list[Path] = typer.Argument(..., help="Recipe JSON files to check.", metavar="FILE..."),
         json_out: bool = JSON_OPTION) -> int:
    """Check recipes against contract major 1 (schema, semantic rules, digest pinning).

    Exit 0 when every file passes, 1 otherwise; one line per problem on stdout:
    FILE: JSON.PATH: MESSAGE [RULE] (control characters in names and values escaped).
    """
    from lemonpack.builder.checks import lint_problems

    results = []
    for f in files:  # one file's failure never stops the others from being reported
        try:
            problems = lint_problems(f)  # contract and build-policy problems: one read
        except LemonpackError as e:
            problems = list(getattr(e, "problems", ())) or [Problem(str(f), "", e.kind, str(e))]
        results.append((f, problems))
    failed = any(p for _, p in results)
    if json_out:
        _print_lint_json(not failed, results)
    else:
        for f, problems in results:  # plain lines, one write per file: thousands of problems stay cheap
            typer.echo("\n".join(map(str, problems)) if problems else one_line(f"{f}: ok"))
    return 1 if failed else 0


def _print_lint_json(ok: bool, results: list[tuple[Path, list[Problem]]]) -> None:
    """``{"files": [{"file", "ok", "problems": [...]}], "ok"}`` indented as :func:`print_json`
    does, except that each problem is one compact line: the C encoder writes it, so
    50,000 problems print in a fraction of a second (``indent`` makes ``json`` use its
    pure-Python encoder)."""
    def dump(value) -> str:
        return json.dumps(value, sort_keys=True)

    out = ['{\n  "files": [']
    for i, (f, problems) in enumerate(results):
        head = f'    {{\n      "file": {dump(str(f))},\n      "ok": {dump(not problems)},\n      "problems": '
        if problems:
            out.append(head + "[")
            out.append(",\n".join("        " + dump(p.to_json()) for p in problems))
            out.append("      ]")
        else:
            out.append(head + "[]")
        out.append("    }" + ("," if i < len(results) - 1 else ""))
    out.append(f'  ],\n  "ok": {dump(ok)}\n}}')
    typer.echo("\n".join(x for x in out if x))


@app.command()
def host(json_out: bool = JSON_OPTION) -> int:
    """Print what platform selection sees on this machine (OS, accelerators, GPU arch).

    Set LEMONPACK_HOST_FACTS to a JSON host description to override detection.
    """
    from lemonpack.contract import detect_host

    facts = detect_host()
    if json_out:
        print_json(facts.to_json())
    else:
        console.print(f"os: {facts.os}")
        console.print(f"accelerators: {', '.join(sorted(facts.accelerators))}")
        console.print(f"rocm_arch: {facts.rocm_arch or '-'}")
        console.print(f"cuda_arch: {facts.cuda_arch or '-'}")
    return 0


schema_app = typer.Typer(rich_markup_mode=HELP_MARKUP,
                       help="The shipped recipe schemas and their lock file.", no_args_is_help=True)
app.add_typer(schema_app, name="schema")


@schema_app.command("check")
def schema_check(json_out: bool = JSON_OPTION) -> int:
    """Verify every shipped schema major against the lock file (exit 1 on drift)."""
    from lemonpack.contract.schemalock import check_lock

    problems = check_lock()
    if json_out:
        print_json({"ok": not problems, "problems": problems})
    else:
        for p in problems:
            err_console.print(p, markup=False)
        if not problems:
            console.print("schema lock: ok")
    return 1 if problems else 0
