"""``extends`` resolution, kept importable from the runtime (RFC section 6).

The pure resolution moved to :mod:`lemonpack.contract.extends` so that the build room
(which may not import the runtime) packages a recipe's bases resolved by the same rule
discovery and ``lemonpack run`` use. This module re-exports it.
"""

from lemonpack.contract.extends import (ExtendsDrop, ExtendsResult, merge_custom_options,  # noqa: F401
                                        merge_recipe_options, resolve_extends)

__all__ = ["ExtendsDrop", "ExtendsResult", "merge_custom_options", "merge_recipe_options", "resolve_extends"]
