"""Moved to :mod:`lemonpack.jsonpath` (below every room); kept as an alias for importers."""

from lemonpack.jsonpath import join

__all__ = ["join"]
