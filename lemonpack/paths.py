"""Where lemonpack keeps things on disk (XDG base directories via platformdirs).

- cache root: ``$LEMONPACK_CACHE_DIR`` or ``$XDG_CACHE_HOME/lemonpack`` (``~/.cache/lemonpack``):
  ``artifacts/sha256/<hex>`` (verified downloads), ``layers/`` (built layer blobs),
  ``external/<recipe>/`` (installed variant_of artifacts, RFC section 9).
- config root: ``$LEMONPACK_CONFIG_DIR`` or ``$XDG_CONFIG_HOME/lemonpack``: ``backends/``
  (user recipes), ``user_models.json`` (the model registry).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_root() -> Path:
    """The lemonpack cache root (not created)."""
    env = os.environ.get("LEMONPACK_CACHE_DIR")
    return Path(env) if env else Path(platformdirs.user_cache_dir("lemonpack"))


def config_root() -> Path:
    """The lemonpack config root (not created)."""
    env = os.environ.get("LEMONPACK_CONFIG_DIR")
    return Path(env) if env else Path(platformdirs.user_config_dir("lemonpack"))


def external_dir(recipe: str) -> Path:
    """``<cache>/external/<recipe>/``: where a variant_of recipe's artifact is installed
    and where its launch plan looks for ``binary`` (RFC section 9)."""
    return cache_root() / "external" / recipe


def lemonade_config_dir() -> Path:
    """Lemonade's own per-user config dir (RFC section 8 names it beside ours)."""
    return Path(platformdirs.user_config_dir("lemonade"))


def lemonade_cache_dir() -> Path:
    """Lemonade's own per-user cache dir (RFC section 8)."""
    return Path(platformdirs.user_cache_dir("lemonade"))
