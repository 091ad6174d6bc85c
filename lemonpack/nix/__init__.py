"""Nix emitter: hash encodings, ``sources.json``, ``recipe.json`` and the ``default.nix`` of recipe packages."""

from lemonpack.nix.emit import (NixSource, attr_name, nix_system, store_name, write_package_nix,
                                write_recipe_json, write_sources_json)
from lemonpack.nix.hashes import nix32_from_hex, sri_from_hex

__all__ = ["NixSource", "attr_name", "nix_system", "store_name", "write_sources_json", "write_recipe_json", "write_package_nix",
           "sri_from_hex", "nix32_from_hex"]
