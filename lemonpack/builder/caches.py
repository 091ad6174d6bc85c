"""What ``lemonpack cache`` does: list, verify and clean the caches under the cache root.

The caches (:mod:`lemonpack.paths`; ``$LEMONPACK_CACHE_DIR`` or ``$XDG_CACHE_HOME/lemonpack``):

- ``artifacts``: downloaded artifacts, ``artifacts/sha256/<hex>``
  (:class:`lemonpack.fetch.ArtifactCache`);
- ``layers``: built artifact layers, ``layers/<key>.json`` + ``layers/blobs/<hex>``
  (:class:`lemonpack.builder.layercache.LayerCache`).

Installed backends (``external/<recipe>/``) are not a cache: nothing here removes them,
only the stale ``external/.<recipe>.install-*`` directories a killed install left.

Partial files are temps whose writer holds a lock (:mod:`lemonpack.fetch.staging`): a
*stale* one (lock free: its writer was killed) is removed by ``clean``; a *live* one
(another lemonpack is downloading or building right now) is never touched, by any command.
The model follows pip (``pip cache list`` / ``purge``), Nix
(``nix-store --verify --check-contents``, ``nix-collect-garbage``) and podman
(``podman system prune``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lemonpack.builder.layercache import LayerCache
from lemonpack.fetch.cache import ArtifactCache, hash_file
from lemonpack.fetch.staging import is_stale, partials, remove_tree, sweep, tree_size
from lemonpack.paths import cache_root


@dataclass(frozen=True)
class CacheItem:
    """One thing in a cache: ``cache`` (``artifacts``/``layers``/``external``), ``name``
    (a digest or a layer key), ``path``, ``size`` bytes, ``state`` (``entry``,
    ``partial-live``, ``partial-stale``, ``orphan``) and ``problem`` (why it is bad, or None)."""

    cache: str
    name: str
    path: Path
    size: int
    state: str = "entry"
    problem: str | None = None

    def to_json(self) -> dict:
        """JSON form (``path`` as a string)."""
        out = {"cache": self.cache, "name": self.name, "path": str(self.path), "size": self.size,
               "state": self.state}
        if self.problem is not None:
            out["problem"] = self.problem
        return out


@dataclass
class Caches:
    """The caches under ``root`` (default :func:`lemonpack.paths.cache_root`)."""

    root: Path = field(default_factory=cache_root)

    @property
    def artifacts(self) -> ArtifactCache:
        """The artifact store at ``<root>/artifacts``."""
        return ArtifactCache(self.root / "artifacts")

    @property
    def layers(self) -> LayerCache:
        """The layer cache at ``<root>/layers``."""
        return LayerCache(self.root / "layers")

    def _partials(self) -> list[tuple[str, Path]]:
        out = [("artifacts", p) for p in self.artifacts.partials()]
        out += [("layers", p) for p in self.layers.partials()]
        out += [("external", p) for p in partials(self.root / "external", (".",))
                if ".install-" in p.name]
        return out

    def list(self) -> list[CacheItem]:
        """Every entry, orphan blob and partial temp, with sizes; nothing is hashed."""
        items = [CacheItem("artifacts", e.digest, e.path, e.size) for e in self.artifacts.entries()]
        for e in self.layers.entries():
            items.append(CacheItem("layers", e.key, e.blob, e.size))
        items += [CacheItem("layers", p.name, p, tree_size(p), "orphan") for p in self.layers.orphans()]
        for cache, p in self._partials():
            items.append(CacheItem(cache, p.name, p, tree_size(p),
                                   "partial-stale" if is_stale(p) else "partial-live"))
        return items

    def verify(self) -> list[CacheItem]:
        """Re-hash every entry; drop each bad one. Returns every entry checked, bad ones
        with ``problem`` set (they are gone from disk when this returns)."""
        out = []
        for e in self.artifacts.entries():
            actual, _ = hash_file(e.path)
            problem = None if "sha256:" + actual == e.digest else f"hashes to sha256:{actual}"
            if problem:
                self.artifacts.drop(e.digest.split(":", 1)[1])
            out.append(CacheItem("artifacts", e.digest, e.path, e.size, problem=problem))
        layers = self.layers
        for e in layers.entries():
            problem = layers.check(e)
            if problem:
                layers.drop(e.key)
            out.append(CacheItem("layers", e.key, e.blob, e.size, problem=problem))
        for p in layers.orphans():
            actual, size = hash_file(p)
            problem = None if actual == p.name else f"hashes to sha256:{actual}"
            if problem:
                p.unlink(missing_ok=True)
            out.append(CacheItem("layers", p.name, p, size, "orphan", problem))
        return out

    def clean(self, partial_only: bool = False) -> list[CacheItem]:
        """Remove stale partial temps and, unless ``partial_only``, every entry of both
        caches (live partials of running writers stay). Returns what was removed."""
        removed = [CacheItem("artifacts", p.name, p, n, "partial-stale") for p, n in self.artifacts.sweep()]
        removed += [CacheItem("layers", p.name, p, n, "partial-stale") for p, n in self.layers.sweep()]
        ext = self.root / "external"
        removed += [CacheItem("external", p.name, p, n, "partial-stale")
                    for p, n in sweep(ext, tuple(q.name for q in partials(ext, (".",)) if ".install-" in q.name))]
        if partial_only:
            return removed
        for item in self.list():
            if item.state.startswith("partial"):
                continue
            if item.cache == "layers" and item.state == "entry":
                self.layers.drop(item.name)
                (self.layers.root / f"{item.name}.json").unlink(missing_ok=True)
            elif item.path.is_dir():
                remove_tree(item.path)
            else:
                item.path.unlink(missing_ok=True)
            removed.append(item)
        return removed


__all__ = ["Caches", "CacheItem"]
