"""Shared fixtures for the oci room's tests."""

from __future__ import annotations


import pytest

from support.tools import need


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: integration tests that drive real podman/skopeo")


@pytest.fixture
def require_tool():
    """``require_tool("skopeo")`` fails the test, naming the apt package, when the tool is missing."""
    return need
