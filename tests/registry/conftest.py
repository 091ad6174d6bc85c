"""Shared helpers of the registry tests: a built layout and the CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.registry import lemonpack


@pytest.fixture(scope="session")
def example_layout(tmp_path_factory) -> Path:
    """``lemonpack build --example`` output: an OCI layout with an image index, an image and a recipe artifact."""
    out = tmp_path_factory.mktemp("example") / "layout"
    lemonpack("build", "--example", "-o", str(out), "--no-progress")
    return out
