"""``lemonpack extensions list|check|generate|build`` and ``lemonpack
diagnose --section extensions`` (seed 002 sections 6 and 8). Printing only: every
decision is :func:`lemonpack.extensions.pipeline.run_pipeline`'s."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from lemonpack.cli._app import HELP_MARKUP, JSON_OPTION, app, console, err_console, print_json
from lemonpack.errors import one_line

if TYPE_CHECKING:
    from lemonpack.extensions.pipeline import Selection

extensions_app = typer.Typer(rich_markup_mode=HELP_MARKUP, no_args_is_help=True,
                             help="Gufo extensions: discover, validate, select and generate the registry.")
app.add_typer(extensions_app, name="extensions")

TREE_OPTION = typer.Option(None, "--tree", metavar="DIR",
                           help="A checkout's top (catalogue/extensions, api/, extensions.lock) to read "
                                "instead of the tree shipped with lemonpack (the release's official extensions).")
DIR_OPTION = typer.Option([], "--extension-dir", metavar="DIR",
                          help="Extra extension directory, or directory of them (repeatable; "
                               "GUFO_EXTENSION_DIRS adds more, ':'-separated).")
LOCK_OPTION = typer.Option(None, "--lock", metavar="FILE", help="Release lock (default: TREE/extensions.lock).")
SELECT_OPTION = typer.Option([], "--select", metavar="WHAT",
                             help="'lock' (default: the release lock's extensions), 'all' (every valid extension "
                                  "at least one of whose targets the features build), 'none' (no extension), or "
                                  "extension names / directories (repeatable).")
FEATURE_OPTION = typer.Option([], "--feature", metavar="FEATURE",
                              help="Build feature (repeatable): hip, cuda, vulkan, testing, linux, windows, macos; "
                                   "'none' alone: the empty set. Default: the host OS, plus hip when ROCm is detected.")

#: ``--select`` and ``--feature`` values that stand alone (Nix's gufo package passes them so that an
#: empty list in its arguments never falls back to a default: nix/gufo.nix)
_SELECT_WORDS = ("lock", "all", "none")


def _features(values: list[str]) -> frozenset[str] | None:
    """``--feature`` values as a set; None (probe the host) when none are given; ``none``
    alone is the empty set. Raises typer.BadParameter on an unknown feature."""
    from lemonpack.extensions.manifest import REQUIREMENTS

    if values == ["none"]:
        return frozenset()
    bad = [v for v in values if v not in REQUIREMENTS]
    if bad:
        raise typer.BadParameter(f"unknown feature {bad[0]!r} (one of {', '.join(REQUIREMENTS)})",
                                 param_hint="--feature")
    return frozenset(values) if values else None


def _run(tree: Path | None, dirs: list[Path], lock: Path | None, select: list[str],
         features: list[str], *, build_step: bool = False, cxx: str | None = None) -> Selection:
    """The pipeline's selection for the command's options. ``build_step`` (generate, build):
    first refuse a tree whose change records disagree with their lock
    (:func:`lemonpack.extensions.apilock.require_record_lock`), so no build derives an API
    revision a removed or edited record made up. ``cxx``: the compiler of the include check."""
    from lemonpack.extensions.apilock import require_record_lock
    from lemonpack.extensions.pipeline import run_pipeline
    from lemonpack.extensions.tree import find_tree

    if build_step:
        require_record_lock(find_tree(tree))

    what: str | list[str] = "lock"
    if select == ["none"]:
        what = []
    elif len(select) == 1 and select[0] in _SELECT_WORDS:
        what = select[0]
    elif select:
        if any(s in _SELECT_WORDS for s in select):
            raise typer.BadParameter("'lock', 'all' and 'none' cannot be combined with names", param_hint="--select")
        what = list(select)
    return run_pipeline(find_tree(tree), extra_dirs=[Path(d) for d in dirs], select=what, lock=lock,
                        features=_features(features), cxx=cxx)


def _ext_json(ext, selection) -> dict:
    status = {s.provider.id: s for s in selection.providers if s.extension is ext}
    return {"name": ext.name, "version": ext.version, "official": ext.official, "path": str(ext.path),
            "api_version": ext.api_version, "dependencies": list(ext.dependencies),
            "providers": [{"id": p.id, "capability": p.capability, "keys": list(p.keys), "target": p.target,
                           "available": status[p.id].available if p.id in status else None,
                           "reason": status[p.id].reason if p.id in status else None} for p in ext.providers]}


def _rejected_json(selection) -> list[dict]:
    return [{"manifest": str(m), "reasons": list(r)} for m, r in selection.rejected]


@extensions_app.command("list")
def list_cmd(tree: Path = TREE_OPTION, extension_dir: list[Path] = DIR_OPTION, lock: Path = LOCK_OPTION,
             select: list[str] = SELECT_OPTION, feature: list[str] = FEATURE_OPTION,
             json_out: bool = JSON_OPTION) -> int:
    """List every discovered extension (selected ones marked), then the rejected manifests
    with every reason. Exit 0 (rejections are listed, not fatal; see 'check')."""
    sel = _run(tree, extension_dir, lock, select, feature)
    chosen = {e.name for e in sel.extensions}
    if json_out:
        print_json({"api_version": sel.api_version, "features": sorted(sel.features),
                    "extensions": [dict(_ext_json(e, sel), selected=e.name in chosen) for e in sel.discovered],
                    "rejected": _rejected_json(sel)})
        return 0
    console.print(f"extension API {sel.api_version}; features: {' '.join(sorted(sel.features)) or '-'}", markup=False)
    for e in sel.discovered:
        mark = "*" if e.name in chosen else " "
        kind = "official" if e.official else "community"
        console.print(one_line(f"{mark} {e.name} {e.version} {kind} {e.path}"), markup=False)
    for m, reasons in sel.rejected:
        console.print(one_line(f"x {m}: rejected"), markup=False)
        for r in reasons:
            console.print(one_line(f"    {r}"), markup=False)
    return 0


@extensions_app.command("check")
def check_cmd(tree: Path = TREE_OPTION, extension_dir: list[Path] = DIR_OPTION, lock: Path = LOCK_OPTION,
              select: list[str] = SELECT_OPTION, feature: list[str] = FEATURE_OPTION,
              json_out: bool = JSON_OPTION) -> int:
    """Validate every discovered manifest, the release lock, the selection, the extension
    schema lock and the API change records. Exit 0 when all pass, 1 otherwise (every reason
    printed)."""
    from lemonpack.extensions.apilock import check_api_lock
    from lemonpack.extensions.manifest import check_schema_lock
    from lemonpack.extensions.tree import find_tree

    root = find_tree(tree)
    sel = _run(root, extension_dir, lock, select, feature)
    api = check_api_lock(root) + check_schema_lock()
    ok = not sel.rejected and not api
    if json_out:
        print_json({"ok": ok, "api_version": sel.api_version, "selected": [e.name for e in sel.extensions],
                    "rejected": _rejected_json(sel), "api": api})
    else:
        for m, reasons in sel.rejected:
            for r in reasons:
                typer.echo(one_line(r if str(m) in r else f"{m}: {r}"))
        for p in api:
            typer.echo(one_line(p))
        if ok:
            console.print(f"extensions: ok ({len(sel.extensions)} selected, API {sel.api_version})", markup=False)
    return 0 if ok else 1


@extensions_app.command("generate")
def generate_cmd(out: Path = typer.Option(..., "--out", metavar="DIR", help="Directory to write the files into."),
                 tree: Path = TREE_OPTION, extension_dir: list[Path] = DIR_OPTION, lock: Path = LOCK_OPTION,
                 select: list[str] = SELECT_OPTION, feature: list[str] = FEATURE_OPTION,
                 json_out: bool = JSON_OPTION) -> int:
    """Write extensions.json, gufo_ext_registry.cpp and gufo_ext_constants.hpp for the
    selection (byte format: docs/extensions-generated.md). Refused when the API change
    records disagree with api/changes.lock.json. Rejected manifests that were not selected
    are reported as warnings on stderr."""
    from lemonpack.extensions.generate import generate, write_generated

    sel = _run(tree, extension_dir, lock, select, feature, build_step=True)
    written = write_generated(generate(sel), out)
    for m, reasons in sel.rejected:
        err_console.print(one_line(f"warning: {m} rejected: {'; '.join(reasons)}"), markup=False)
    if json_out:
        print_json({"files": [str(p) for p in written], "selected": [e.name for e in sel.extensions],
                    "api_version": sel.api_version, "features": sorted(sel.features)})
    else:
        for p in written:
            console.print(one_line(str(p)), markup=False)
    return 0


@extensions_app.command("build")
def build_cmd(out: Path = typer.Option(..., "--out", metavar="DIR",
                                       help="Directory to build into (replaced as a whole when it exists)."),
              tree: Path = TREE_OPTION, extension_dir: list[Path] = DIR_OPTION, lock: Path = LOCK_OPTION,
              select: list[str] = SELECT_OPTION, feature: list[str] = FEATURE_OPTION,
              cxx: str = typer.Option(None, "--cxx", metavar="PROGRAM", help="C++17 compiler (default: $CXX or g++)."),
              jobs: int = typer.Option(2, "--jobs", "-j", min=1, metavar="N", help="Compilers run at once."),
              cpu_arch: str = typer.Option(None, "--cpu-arch", metavar="ARCH", help="OCI architecture to compile "
                                           "for (default: this machine's; another one uses the GNU cross "
                                           "compiler, e.g. aarch64-linux-gnu-g++ for arm64)."),
              json_out: bool = JSON_OPTION) -> int:
    """Compile the selection: the generated registry, the constants header, the public API
    headers and the selected extensions' sources into OUT/bin/gufo-registry (prints what
    registered; --json for JSON), OUT/include and OUT/lib/libgufo-ext.a. Same flags and
    checks as 'generate'. Deterministic; OUT is replaced atomically."""
    from lemonpack.extensions.compile import compile_gufo

    sel = _run(tree, extension_dir, lock, select, feature, build_step=True, cxx=cxx)
    built = compile_gufo(sel, out, cxx=cxx, jobs=jobs, cpu_arch=cpu_arch)
    for m, reasons in sel.rejected:
        err_console.print(one_line(f"warning: {m} rejected: {'; '.join(reasons)}"), markup=False)
    if json_out:
        print_json(dict(built.to_json(), api_version=sel.api_version, features=sorted(sel.features)))
    else:
        for p in (built.bin, built.include, built.lib):
            console.print(one_line(str(p)), markup=False)
    return 0


@app.command()
def diagnose(section: str = typer.Option("extensions", "--section", metavar="SECTION",
                                         help="What to report: extensions."),
             tree: Path = TREE_OPTION, extension_dir: list[Path] = DIR_OPTION, lock: Path = LOCK_OPTION,
             select: list[str] = SELECT_OPTION, feature: list[str] = FEATURE_OPTION,
             json_out: bool = JSON_OPTION) -> int:
    """What a build of this selection compiles in, for bug reports: each selected extension
    with its version, official or community, path, and its providers with availability and
    the reason for each unavailable one (seed 002 section 6)."""
    if section != "extensions":
        raise typer.BadParameter(f"unknown section {section!r} (sections: extensions)", param_hint="--section")
    sel = _run(tree, extension_dir, lock, select, feature)
    if json_out:
        print_json({"extensions": {"api_version": sel.api_version, "features": sorted(sel.features),
                                   "selected": [_ext_json(e, sel) for e in sel.extensions],
                                   "rejected": _rejected_json(sel)}})
        return 0
    console.print(f"extensions (API {sel.api_version}; features: {' '.join(sorted(sel.features)) or '-'})",
                  markup=False)
    for e in sel.extensions:
        kind = "official" if e.official else "community"
        console.print(one_line(f"  {e.name} {e.version} ({kind}) {e.path}"), markup=False)
        for s in (s for s in sel.providers if s.extension is e):
            state = "available" if s.available else f"unavailable: {s.reason}"
            console.print(one_line(f"    {s.provider.id} [{s.provider.capability}] {state}"), markup=False)
    for m, reasons in sel.rejected:
        console.print(one_line(f"  rejected {m}: {'; '.join(reasons)}"), markup=False)
    return 0
