"""Fixtures of the extension tests: a private copy of the repository's extension tree."""

from __future__ import annotations

import pytest

from support.extensions import copy_tree


@pytest.fixture
def tree(tmp_path):
    """A copy of catalogue/extensions, api/, extensions.lock and the public headers."""
    return copy_tree(tmp_path / "tree")
