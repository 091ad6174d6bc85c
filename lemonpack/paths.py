"""Where lemonpack keeps things on disk (XDG base directories via platformdirs).

- cache root: ``$LEMONPACK_CACHE_DIR`` or ``$XDG_CACHE_HOME/lemonpack`` (``~/.cache/lemonpack``):
  ``artifacts/sha256/<hex>`` (verified downloads), ``layers/`` (built layer blobs),
  ``external/<recipe>/`` (installed variant_of artifacts, RFC section 9), ``models/`` (the
  model store); each thing in them as ``lemonpack cache`` shows it is a :class:`CacheItem`.
- config root: ``$LEMONPACK_CONFIG_DIR`` or ``$XDG_CONFIG_HOME/lemonpack``: ``backends/``
  (user recipes), ``user_models.json`` (the model registry).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs


@dataclass(frozen=True)
class CacheItem:
    """One thing in a cache, as ``lemonpack cache list|verify|clean`` shows it: ``cache``
    (``artifacts``/``layers``/``external``: :class:`lemonpack.builder.caches.Caches`;
    ``models``: :class:`lemonpack.runtime.models.store.ModelStore`), ``name`` (a digest, a
    layer key, ``view sha256:...``), ``path``, ``size`` bytes, ``state`` (``entry``, ``bad``: an
    entry found unusable, e.g. a directory or a symlink where a file belongs, a layer record
    stating another key's inputs, a blob whose bytes are not its digest; ``partial-live``: being
    written right now, ``partial-stale``: left by a killed run, ``orphan``) and ``problem`` (why
    it is bad, or None)."""

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


def cache_root() -> Path:
    """The lemonpack cache root (not created)."""
    env = os.environ.get("LEMONPACK_CACHE_DIR")
    return Path(env) if env else Path(platformdirs.user_cache_dir("lemonpack"))


def require_cache_root() -> Path:
    """:func:`cache_root`, checked before anything is written under it: it (or, when it
    does not exist yet, its nearest existing ancestor) must be a directory. Raises
    :class:`~lemonpack.errors.StorageError` naming the path and where it came from
    (``LEMONPACK_CACHE_DIR`` or the XDG default) instead of a ``NotADirectoryError`` later."""
    root = cache_root()
    probe = root
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if probe.is_dir():
        return root
    from lemonpack.errors import StorageError

    origin = ("LEMONPACK_CACHE_DIR" if os.environ.get("LEMONPACK_CACHE_DIR")
              else "the default cache directory (set LEMONPACK_CACHE_DIR to use another)")
    what = "is not a directory" if probe == root else f"cannot be created: {probe} is not a directory"
    raise StorageError(f"cache directory {root} ({origin}) {what}")


def config_root() -> Path:
    """The lemonpack config root (not created)."""
    env = os.environ.get("LEMONPACK_CONFIG_DIR")
    return Path(env) if env else Path(platformdirs.user_config_dir("lemonpack"))


def external_dir(recipe: str) -> Path:
    """``<cache>/external/<recipe>/``: where a variant_of recipe's artifact is installed
    and where its launch plan looks for ``binary`` (RFC section 9). Raises StorageError
    when the cache root is not a directory (:func:`require_cache_root`)."""
    return require_cache_root() / "external" / recipe


def install_record(external: Path) -> Path:
    """The install record (receipt) of the artifact installed at ``external``
    (``<cache>/external/<recipe>/``): ``<cache>/external/<recipe>.install.json``, written by
    ``lemonpack install`` beside the tree and read at launch to check the recipe's pin."""
    return external.parent / f"{external.name}.install.json"


def lemonade_config_dir() -> Path:
    """Lemonade's own per-user config dir (RFC section 8 names it beside ours)."""
    return Path(platformdirs.user_config_dir("lemonade"))


def lemonade_cache_dir() -> Path:
    """Lemonade's own per-user cache dir (RFC section 8)."""
    return Path(platformdirs.user_cache_dir("lemonade"))
