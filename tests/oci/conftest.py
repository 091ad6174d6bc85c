"""Shared fixtures for the oci room's tests."""

from __future__ import annotations

import shutil

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: integration tests that drive real podman/skopeo")


@pytest.fixture
def require_tool():
    """``require_tool("skopeo")`` skips the test when the tool is not installed."""
    def need(name: str) -> str:
        path = shutil.which(name)
        if path is None:
            pytest.skip(f"{name} not installed")
        return path
    return need
