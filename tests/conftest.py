"""Fixtures shared by every test folder."""

from __future__ import annotations

import pytest

from support.fileserver import LocalServer


@pytest.fixture
def server(tmp_path):
    """A real HTTP server on 127.0.0.1 serving ``tmp_path/www`` (see support/fileserver.py)."""
    (tmp_path / "www").mkdir(exist_ok=True)
    srv = LocalServer(tmp_path / "www")
    try:
        yield srv
    finally:
        srv.stop()
