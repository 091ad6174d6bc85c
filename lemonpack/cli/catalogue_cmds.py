"""``lemonpack catalogue lint|build|search|show|update|verify``. Printing only:
the work is :mod:`lemonpack.catalogue`'s."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from lemonpack.cli._app import HELP_MARKUP, JSON_OPTION, REGISTRY_CONFIG_OPTION, app, console, print_json
from lemonpack.errors import CatalogueError, ConfigError, one_line

catalogue_app = typer.Typer(rich_markup_mode=HELP_MARKUP, no_args_is_help=True,
                            help="The catalogue of official and community recipes and extensions.")
app.add_typer(catalogue_app, name="catalogue")

INDEX_OPTION = typer.Option(None, "--index", metavar="PATH",
                            help="A built index (directory or catalogue.json); default: the cached copy "
                                 "(lemonpack catalogue update).")


@catalogue_app.command("lint")
def lint_cmd(paths: list[Path] = typer.Argument(None, metavar="[PATHS]...",
                                                help="Publisher/entry TOML files or catalogue/ directories "
                                                     "(default: ./catalogue)."),
             json_out: bool = JSON_OPTION) -> int:
    """Check catalogue sources offline: every problem of every file, with its path."""
    from lemonpack.catalogue.sources import lint_paths

    targets = list(paths or [Path("catalogue")])
    problems = lint_paths(targets)
    if json_out:
        print_json({"ok": not problems, "problems": [p.to_json() for p in problems]})
    else:
        for p in problems:
            typer.echo(str(p))
        if not problems:
            typer.echo(one_line(f"{', '.join(map(str, targets))}: ok"))
    return 1 if problems else 0


def _password() -> bytes:
    from lemonpack.cli.signing_cmds import read_password

    return read_password(confirm=False, what="the catalogue key")


@catalogue_app.command("build")
def build_cmd(out: Path = typer.Option(..., "--out", metavar="DIR", help="Output directory (replaced atomically)."),
              source: Path = typer.Option(Path("."), "--source", metavar="DIR",
                                          help="Repository top holding catalogue/ (default: .)."),
              mirror: str = typer.Option(None, "--mirror", metavar="URL",
                                         help="Fetch http(s) sources from this mirror (default: $LEMONPACK_MIRROR)."),
              key: Path = typer.Option(None, "--key", metavar="KEY",
                                       help="cosign private key signing the index (password: $LEMONPACK_PASSWORD)."),
              rebuild: bool = typer.Option(False, "--rebuild", help="Rebuild recipes to check reproducibility."),
              fresh: bool = typer.Option(False, "--fresh",
                                         help="Verify every entry again (ignore what earlier builds verified "
                                              "for unchanged entry files)."),
              insecure_registry: bool = typer.Option(False, "--insecure-registry",
                                                     help="Plain http to OCI registries (loopback tests)."),
              registry_config: Path = REGISTRY_CONFIG_OPTION,
              json_out: bool = JSON_OPTION) -> int:
    """Fetch, verify and index every entry; write catalogue.json, entries/, the signature,
    feed.atom and the static site into DIR (byte-reproducible; SOURCE_DATE_EPOCH dates)."""
    from lemonpack.catalogue.build import BuildConfig, build
    from lemonpack.catalogue.dates import source_epoch
    from lemonpack.paths import cache_root
    from lemonpack.fetch import Mirror

    cfg = BuildConfig(out=out, source=source, mirror=Mirror.from_env(mirror), key=key,
                      password=_password() if key else b"", rebuild=rebuild, epoch=source_epoch(source),
                      insecure_registry=insecure_registry, registry_config=registry_config,
                      memo=None if fresh else cache_root() / "catalogue-build" / "memo.json")
    index = build(cfg)
    if json_out:
        print_json({"out": str(out), "entries": [e["id"] for e in index["entries"]], "rejected": index["rejected"],
                    "signed": key is not None})
    else:
        console.print(f"{out}: {len(index['entries'])} entries, {len(index['rejected'])} rejected"
                      + ("" if key else " (index not signed: no --key)"), markup=False)
        for r in index["rejected"]:
            typer.echo(one_line(f"rejected {r['id']} ({r['file']}): {'; '.join(r['reasons'])}"))
    return 0


def _filters(kind, capability, accelerator, os_name, gpu_arch, official, community) -> dict:
    f: dict = {}
    for name, value in (("kind", kind), ("capability", capability), ("accelerator", accelerator),
                        ("os", os_name), ("gpu_arch", gpu_arch)):
        if value:
            f[name] = list(value)
    if official and community:
        raise typer.BadParameter("--official and --community exclude each other")
    if official or community:
        f["official"] = bool(official)
    return f


def _budget(text: str | None) -> int | None:
    if text is None:
        return None
    from lemonpack.runtime.serving.budget import parse_size

    return parse_size(text)


@catalogue_app.command("search")
def search_cmd(query: str = typer.Argument("", help="Terms (all must match; case-insensitive; platforms, "
                                                    "accelerators and GPU archs are words too)."),
               kind: list[str] = typer.Option([], "--kind", help="recipe, extension or model (repeatable: any of)."),
               capability: list[str] = typer.Option([], "--capability", help="Capability (repeatable)."),
               accelerator: list[str] = typer.Option([], "--accelerator", help="Accelerator (repeatable)."),
               os_name: list[str] = typer.Option([], "--os", help="OS: linux, windows, darwin (repeatable)."),
               gpu_arch: list[str] = typer.Option([], "--gpu-arch",
                                                  help="Concrete GPU arch, e.g. gfx1151: entries that run on it "
                                                       "(repeatable)."),
               official: bool = typer.Option(False, "--official", help="Official entries only."),
               community: bool = typer.Option(False, "--community", help="Community entries only."),
               fits_host: bool = typer.Option(False, "--fits-host",
                                              help="Only entries that run on this host (LEMONPACK_HOST_FACTS or detection)."),
               host_facts: Path = typer.Option(None, "--host-facts", metavar="FILE",
                                               help="Host facts file (lemonpack host --json) for --fits-host."),
               memory_budget: str = typer.Option(None, "--memory-budget", metavar="SIZE",
                                                 help="Memory budget model entries must fit (24GiB; default: "
                                                      "this host's available memory minus 1 GiB, as serve)."),
               sort: str = typer.Option("relevance", "--sort",
                                        help="relevance, name, new (first published) or updated (latest version)."),
               index: str = INDEX_OPTION, json_out: bool = JSON_OPTION) -> int:
    """Search the built index (same rules as the site's search box); an unknown filter value
    is an error naming the choices (exit 2), a term no entry has is replaced by its near miss."""
    from lemonpack.catalogue.index import gc_paused, load_index, load_search_index
    from lemonpack.catalogue.search import check_filters, search_report, sort_entries

    with gc_paused():  # no cycles made: the collector's passes over the index cost more than the search
        # the compact search index when it matches catalogue.json; the host fit reads whole entries
        data = load_index(index) if fits_host or host_facts or memory_budget else load_search_index(index)
        report = search_report(data, query, check_filters(
            data, _filters(kind, capability, accelerator, os_name, gpu_arch, official, community)))
        report["results"] = sort_entries(report["results"], sort)
        if fits_host or host_facts or memory_budget:  # imported only then: the contract (jsonschema) is most of a search's start-up
            from lemonpack.catalogue.fits import host_fit, install_command, search_host
        budget = _budget(memory_budget)
        host = search_host(host_facts) if fits_host or host_facts or memory_budget else None
        rows = []
        for e in report["results"]:
            fit = None
            if host is not None:
                fit = host_fit(e, host, budget)
                if fits_host and not fit.fits:
                    continue
            rows.append((e, fit))
        if json_out:
            print_json({"query": query, "corrected": report["corrected"], "results": [
                {"id": e["id"], "display_name": e["display_name"], "official": e["official"], "publisher": e["publisher"],
                 **({"fits": fit.reason, "runs_here": fit.fits, "install": install_command(e, fit)}
                    if fit is not None else {})} for e, fit in rows]})
        else:
            for term, word in report["corrected"].items():
                typer.echo(one_line(f"no entry has {term!r}: did you mean {word!r}? showing results for {word!r}"), err=True)
            for e, fit in rows:
                badge = "official" if e["official"] else e["publisher"]
                typer.echo(one_line(f"{e['id']}  [{badge}]  {e['display_name']}" + (f"  ({fit.reason})" if fit else "")))
            if not rows:
                typer.echo("no matches")
        return 0


@catalogue_app.command("show")
def show_cmd(ident: str = typer.Argument(..., metavar="ID", help="recipe:NAME, extension:NAME, model:NAME or NAME."),
             host_facts: Path = typer.Option(None, "--host-facts", metavar="FILE",
                                             help="Host facts file (lemonpack host --json) the shown install "
                                                  "command is for (default: LEMONPACK_HOST_FACTS or detection)."),
             memory_budget: str = typer.Option(None, "--memory-budget", metavar="SIZE",
                                               help="Memory budget a model entry must fit (24GiB; default: this "
                                                    "host's available memory minus 1 GiB, as serve)."),
             index: str = INDEX_OPTION, json_out: bool = JSON_OPTION) -> int:
    """Show one entry: source, digests, platforms, signature, pinning, whether it runs on this
    host, and the commands (the install command as install selects on this host)."""
    from lemonpack.catalogue.commands import ORDER
    from lemonpack.catalogue.index import find_entry, load_index, locate
    from lemonpack.catalogue.signatures import describe, index_digest
    from lemonpack.catalogue.sources import DESCRIBED

    from lemonpack.catalogue.fits import host_fit, install_command, search_host
    from lemonpack.catalogue.models import model_lines

    e = find_entry(load_index(index), ident)
    fit = host_fit(e, search_host(host_facts), _budget(memory_budget))
    commands = dict(e["commands"])
    if commands.get("install"):
        commands["install"] = install_command(e, fit)
    if json_out:
        print_json({**e, "host": {"runs_here": fit.fits, "reason": fit.reason, "commands": commands}})
        return 0
    digest = index_digest(locate(index).read_bytes()) if e["signature"]["status"] == "in-tree" else None
    order = [k for k, _ in ORDER] + sorted(k for k in commands if k not in dict(ORDER))
    lines = [f"{e['id']}  {e['display_name']}  ({'official' if e['official'] else 'community: ' + e['publisher']})",
             "   ".join(f"{k}: {e.get(k) or '-'}" for k in ("version", *DESCRIBED)),
             f"source: {json.dumps(e['source'], sort_keys=True)}", f"digest: {e['digest']}",
             f"capabilities: {', '.join(e['capabilities']) or '-'}   tags: {', '.join(e['tags']) or '-'}",
             f"signature: {describe(e['signature'], digest)}",
             f"pinning: {e['pinning']['status']}",
             *[f"  image {i['ref']}: {'pinned' if i['pinned'] else 'NOT pinned'}" for i in e["pinning"]["images"]],
             *[f"  artifact {a['url']}: {a['sha256'] or 'NOT pinned'}" for a in e["pinning"]["artifacts"]],
             f"reproducible: {e['reproducible']['status']}"
             + (f" (published {e['reproducible']['published']}, rebuilt {e['reproducible']['rebuilt']})"
                if e['reproducible'].get('published') or e['reproducible'].get('rebuilt') else ""),
             "versions:" + ("" if e.get("history") else " -"),
             *[f"  {h.get('version') or '-'}  {h.get('date') or '-'}  {h['digest']}"
               for h in reversed(e.get("history") or [])],
             *(model_lines(e) if e["kind"] == "model" else []),
             "platforms:",
             *[f"  {p['os']}/{p['accelerator']}" + (f" {', '.join(p['archs'])}" if p["archs"] else "")
               for p in e["platforms"]],
             f"this host: {'runs here' if fit.fits else 'does not run here'} ({fit.reason})",
             "commands:", *[f"  {k}: {commands[k]}" for k in order if commands.get(k)]]
    # the description keeps its line breaks; every other control and bidi override is escaped
    description = "\n".join(one_line(line) for line in str(e["description"]).split("\n"))
    typer.echo("\n".join(one_line(x) for x in lines) + "\n\n" + description)
    return 0


@catalogue_app.command("fetch")
def fetch_cmd(url: str = typer.Argument(..., metavar="URL", help="The entry's source URL (https, or git with --commit)."),
              sha256: str = typer.Option(..., "--sha256", metavar="sha256:HEX",
                                         help="The digest the catalogue verified (a tree listing's for git)."),
              out: Path = typer.Option(..., "--out", metavar="PATH", help="Where to put the recipe file or extension directory."),
              commit: str = typer.Option(None, "--commit", help="A git source: the commit."),
              path: str = typer.Option(None, "--path", help="A git source: the path in the commit."),
              extension: bool = typer.Option(None, "--extension/--recipe",
                                             help="What the source holds (default: an extension for archives and "
                                                  "git directories, else a recipe)."),
              mirror: str = typer.Option(None, "--mirror", metavar="URL", help="Mirror (default: $LEMONPACK_MIRROR)."),
              json_out: bool = JSON_OPTION) -> int:
    """Download an entry's source by digest, as the catalogue build verified it: OUT is
    written only when the digest matches (exit 3 otherwise, nothing written). The download
    step shown on entry pages and by catalogue show."""
    from lemonpack.catalogue.fetching import fetch_to
    from lemonpack.fetch import Mirror

    from lemonpack.digest import is_sha256_digest

    if not is_sha256_digest(sha256):
        raise typer.BadParameter(f"{sha256!r} is not a digest: write sha256:<64 lowercase hex digits>",
                                 param_hint="--sha256")
    if (commit is None) != (path is None):
        raise typer.BadParameter("a git source needs both --commit and --path", param_hint="--commit")
    if commit is not None:
        src = {"type": "git", "url": url, "commit": commit, "path": path, "sha256": sha256}
        kind = "extension" if extension is None and not path.endswith(".json") else "recipe"
    else:
        src = {"type": "https", "url": url, "sha256": sha256}
        kind = "recipe" if extension is None and url.split("?", 1)[0].endswith(".json") else "extension"
    if extension is not None:
        kind = "extension" if extension else "recipe"
    digest = fetch_to(kind, src, out, mirror=Mirror.from_env(mirror))
    if json_out:
        print_json({"out": str(out), "kind": kind, "digest": digest})
    else:
        typer.echo(one_line(f"{out}: {kind}, {digest} verified"))
    return 0


@catalogue_app.command("sign")
def sign_cmd(entry: Path = typer.Argument(..., metavar="ENTRY", help="A community entry file (entries/PUBLISHER/NAME.toml)."),
             key: Path = typer.Option(..., "--key", metavar="KEY",
                                      help="cosign private key file (lemonpack keygen; password: $LEMONPACK_PASSWORD)."),
             mirror: str = typer.Option(None, "--mirror", metavar="URL", help="Mirror (default: $LEMONPACK_MIRROR)."),
             json_out: bool = JSON_OPTION) -> int:
    """Sign an entry (sign-blob): fetch its source by digest, sign the file, archive or tree
    listing, and write the [signature] value into ENTRY."""
    from lemonpack.catalogue.signing import sign_entry
    from lemonpack.fetch import Mirror

    info = sign_entry(entry, key, _password(), mirror=Mirror.from_env(mirror))
    if json_out:
        print_json(info)
    else:
        typer.echo(one_line(f"{entry}: signed {info['digest']} with {info['fingerprint']}"
                            + ("" if info["publisher_key"] else " (not one of the publisher's keys: the entry "
                               "names it and shows as 'unknown key' until the publisher file lists it)")))
    return 0


@catalogue_app.command("fingerprint")
def fingerprint_cmd(key: Path = typer.Argument(..., metavar="KEY.pub", help="A PEM public key (lemonpack keygen's .pub).")) -> int:
    """Print a public key's fingerprint (sha256: of the DER key), as publisher files list it."""
    from lemonpack.catalogue.sources import key_fingerprint
    from lemonpack.files import read_user_file

    try:
        typer.echo(key_fingerprint(read_user_file(key, "public key file")))
    except ValueError as e:
        raise ConfigError(f"{key}: not a PEM public key: {e}") from None
    return 0


@catalogue_app.command("update")
def update_cmd(source: str = typer.Option(..., "--from", metavar="URL|DIR", help="A built index (URL or directory)."),
               key: Path = typer.Option(None, "--key", metavar="PUBLIC.pem",
                                        help="Trusted public key (default: <config>/lemonpack/catalogue.pub)."),
               json_out: bool = JSON_OPTION) -> int:
    """Fetch an index, verify its signature and entry files, then replace the cached copy."""
    from lemonpack.catalogue.index import trusted_key, update

    info = update(source, trusted_key(key))
    if json_out:
        print_json(info)
    else:
        console.print(f"catalogue updated: {info['entries']} entries, generated {info['generated']} ({info['path']})",
                      markup=False)
    return 0


@catalogue_app.command("verify")
def verify_cmd(directory: Path = typer.Argument(None, metavar="[DIR]", help="Built index (default: the cached copy)."),
               key: Path = typer.Option(None, "--key", metavar="PUBLIC.pem",
                                        help="Trusted public key (default: <config>/lemonpack/catalogue.pub)."),
               refetch: bool = typer.Option(False, "--fetch", help="Also re-fetch https sources and check their digests."),
               mirror: str = typer.Option(None, "--mirror", metavar="URL", help="Mirror for --fetch."),
               json_out: bool = JSON_OPTION) -> int:
    """Re-check a built or cached index: signature, entry files, (with --fetch) source digests. Exit 3 on failure."""
    from lemonpack.catalogue.index import cached_dir, load_index, refetch_problems, trusted_key, verify_dir
    from lemonpack.fetch import Mirror

    d = directory or cached_dir()
    if not (d / "catalogue.json").is_file():
        raise CatalogueError(f"no catalogue.json in {d}")
    problems = verify_dir(d, trusted_key(key))
    if refetch:
        problems += refetch_problems(load_index(d), mirror=Mirror.from_env(mirror))
    if json_out:
        print_json({"ok": not problems, "problems": problems})
    else:
        for p in problems:
            typer.echo(one_line(p))
        if not problems:
            typer.echo(f"{d}: ok")
    return 3 if problems else 0


__all__ = ["catalogue_app"]
