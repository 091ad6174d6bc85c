"""``lemonpack cache list|verify|clean``: the download and layer caches
(:mod:`lemonpack.builder.caches`) and the model store (:mod:`lemonpack.runtime.models.store`,
cache ``models``: blobs, partial blobs, per-model views), as ``pip cache``, ``nix-store
--verify`` and ``podman system prune`` users expect.

Exit codes: ``list`` and ``clean`` 0; 1 when the cache root is not a directory (one
line naming it and ``LEMONPACK_CACHE_DIR``); ``verify`` 0 when every entry hashed to its name,
3 (integrity) when some did not: those were removed, so the next fetch or build replaces
them, and the non-zero status tells a script the disk or someone changed cached files.
"""

from __future__ import annotations

import typer

from lemonpack.cli._app import JSON_OPTION, app, console, print_json

cache_app = typer.Typer(help="The download and built-layer caches and the model store under "
                        "$LEMONPACK_CACHE_DIR (default $XDG_CACHE_HOME/lemonpack).", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def _totals(items) -> dict:
    per: dict[str, dict] = {}
    for i in items:
        t = per.setdefault(i.cache, {"count": 0, "size": 0})
        t["count"] += 1
        t["size"] += i.size
    return per


@cache_app.command("list")
def list_cmd(json_out: bool = JSON_OPTION) -> int:
    """List cache entries and model-store blobs with their sizes, per cache and in total.

    States: entry, bad (not usable as it is, e.g. a directory or symlink where a file
    belongs; `cache verify` or `cache clean` removes it; never used), orphan (a layer blob
    no record names), partial-live (being written by
    a running lemonpack), partial-stale (left by a killed one; `cache clean --partial`).
    """
    from lemonpack.builder.caches import CacheItem, Caches
    from lemonpack.runtime.models.store import ModelStore

    caches = Caches()
    items: list[CacheItem] = [*caches.list(), *ModelStore(caches.root / "models").list()]
    per = _totals(items)
    total = sum(i.size for i in items)
    if json_out:
        print_json({"root": str(caches.root), "entries": [i.to_json() for i in items],
                    "caches": per, "total": total})
        return 0
    console.print(f"cache root: {caches.root}", markup=False)
    for i in items:
        state = "" if i.state == "entry" else f"  [{i.state}{': ' + i.problem if i.problem else ''}]"
        console.print(f"  {i.cache:<10} {_size(i.size):>10}  {i.name}{state}", markup=False)
    for name, t in sorted(per.items()):
        console.print(f"{name}: {t['count']} item(s), {_size(t['size'])}", markup=False)
    console.print(f"total: {_size(total)}", markup=False)
    return 0


@cache_app.command("verify")
def verify_cmd(json_out: bool = JSON_OPTION) -> int:
    """Re-hash every entry and model blob; remove each one that is not what its name says.

    Exit 3 when any entry was bad (it is gone; the next install or build fetches or
    rebuilds it), else 0. Like `nix-store --verify --check-contents`.
    """
    from lemonpack.builder.caches import CacheItem, Caches
    from lemonpack.runtime.models.store import ModelStore

    caches = Caches()
    items: list[CacheItem] = [*caches.verify(), *ModelStore(caches.root / "models").verify()]
    bad = [i for i in items if i.problem]
    if json_out:
        print_json({"checked": len(items), "bad": [i.to_json() for i in bad]})
    else:
        for i in bad:
            console.print(f"removed {i.cache} {i.name}: {i.problem}", markup=False)
        console.print(f"{len(items)} entr{'y' if len(items) == 1 else 'ies'} checked, {len(bad)} bad "
                      f"{'(removed)' if bad else ''}".rstrip(), markup=False)
    return 3 if bad else 0


@cache_app.command("clean")
def clean_cmd(partial: bool = typer.Option(False, "--partial", help="Only remove stale partial "
                                           "downloads and build temps (left by killed runs)."),
              json_out: bool = JSON_OPTION) -> int:
    """Remove every cache entry, pulled model and stale partial file (installed backends stay).

    A partial file another lemonpack is still writing is never removed; a stale partial model
    blob goes with --partial too (the next pull starts it again).
    """
    from lemonpack.builder.caches import CacheItem, Caches
    from lemonpack.runtime.models.store import ModelStore

    caches = Caches()
    removed: list[CacheItem] = [*caches.clean(partial_only=partial),
                                            *ModelStore(caches.root / "models").clean(partial_only=partial)]
    freed = sum(i.size for i in removed)
    if json_out:
        print_json({"removed": [i.to_json() for i in removed], "freed": freed})
    else:
        console.print(f"removed {len(removed)} item(s), freed {_size(freed)}", markup=False)
    return 0
