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

import builtins
from dataclasses import dataclass, field
from pathlib import Path

from lemonpack.builder.layercache import LayerCache
from lemonpack.digest import file_digest, hex_of, sha256_text
from lemonpack.fetch.cache import ArtifactCache
from lemonpack.fetch.staging import is_stale, kind_of, partials, remove_entry, sweep, tree_size
from lemonpack.paths import CacheItem, require_cache_root




@dataclass
class Caches:
    """The caches under ``root`` (default :func:`lemonpack.paths.require_cache_root`:
    StorageError when it is not a directory)."""

    root: Path = field(default_factory=require_cache_root)

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
        """Every entry (bad ones too: state ``bad``), orphan blob and partial temp, with
        sizes; nothing is hashed."""
        items = [CacheItem("artifacts", e.digest, e.path, e.size, "bad" if e.problem else "entry", e.problem)
                 for e in self.artifacts.entries()]
        for e in self.layers.entries():
            items.append(CacheItem("layers", e.key, e.blob, e.size, "bad" if e.problem else "entry", e.problem))
        items += [CacheItem("layers", p.name, p, tree_size(p), "orphan") for p in self.layers.orphans()]
        for cache, p in self._partials():
            items.append(CacheItem(cache, p.name, p, tree_size(p),
                                   "partial-stale" if is_stale(p) else "partial-live"))
        return items

    def verify(self) -> builtins.list[CacheItem]:  # builtins: ``list`` is a method here
        """Re-hash every entry; drop each bad one (whatever it is: a file that does not
        hash to its name or cannot be read, a directory, a symlink, a layer record of
        another key ...). Returns every entry checked, bad ones with ``problem`` set (they
        are gone from disk when this returns)."""
        out: builtins.list[CacheItem] = []
        for e in self.artifacts.entries():
            problem = e.problem or _hash_problem(e.path, hex_of(e.digest))
            if problem:
                self.artifacts.remove(e)
            out.append(CacheItem("artifacts", e.digest, e.path, e.size, problem=problem))
        layers = self.layers
        for le in layers.entries():
            problem = layers.check(le)
            if problem:
                layers.drop(le.key)
            out.append(CacheItem("layers", le.key, le.blob, le.size, problem=problem))
        for p in layers.orphans():
            problem = _hash_problem(p, p.name)
            size = tree_size(p)
            if problem:
                remove_entry(p)
            out.append(CacheItem("layers", p.name, p, size, "orphan", problem))
        return out

    def clean(self, partial_only: bool = False) -> builtins.list[CacheItem]:
        """Remove stale partial temps (the caches', and the ``OUT.tmp-*`` directories of killed
        pulls the cache recorded: :func:`lemonpack.registry.partials.sweep_partial_pulls`) and,
        unless ``partial_only``, every entry of both caches (live partials of running writers
        stay). Returns what was removed."""
        removed = [CacheItem("artifacts", p.name, p, n, "partial-stale") for p, n in self.artifacts.sweep()]
        removed += [CacheItem("layers", p.name, p, n, "partial-stale") for p, n in self.layers.sweep()]
        ext = self.root / "external"
        removed += [CacheItem("external", p.name, p, n, "partial-stale")
                    for p, n in sweep(ext, tuple(q.name for q in partials(ext, (".",)) if ".install-" in q.name))]
        from lemonpack.registry.partials import sweep_partial_pulls

        removed += [CacheItem("pulls", p.name, p, n, "partial-stale") for p, n in sweep_partial_pulls()]
        if partial_only:
            return removed
        for item in self.list():
            if item.state.startswith("partial"):
                continue
            if item.cache == "layers" and item.state in ("entry", "bad"):
                self.layers.drop(item.name)
            else:
                remove_entry(item.path)  # a symlink itself, never what it points to
            removed.append(item)
        return removed


def _hash_problem(path: Path, hex_name: str) -> str | None:
    """Why the file ``path`` is not the one its name ``hex_name`` says, or None."""
    kind = kind_of(path)
    if kind != "file":
        return f"not a regular file ({kind})"
    try:
        actual = file_digest(path)[0].hex
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None if actual == hex_name else f"hashes to {sha256_text(actual)}"


__all__ = ["Caches", "CacheItem"]
