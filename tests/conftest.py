"""Fixtures shared by every test folder."""

from __future__ import annotations

import pytest

from support.fileserver import LocalServer
from support.tools import need


@pytest.fixture
def server(tmp_path):
    """A real HTTP server on 127.0.0.1 serving ``tmp_path/www`` (see support/fileserver.py)."""
    (tmp_path / "www").mkdir(exist_ok=True)
    srv = LocalServer(tmp_path / "www")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def nix_installed():
    """Fails (never skips) when Nix is missing: the Nix tests must run in CI."""
    need("nix-build")
    need("nix-hash")
