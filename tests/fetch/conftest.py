"""Fixtures for the fetch tests: a real HTTP server on 127.0.0.1 serving a temp directory."""

from __future__ import annotations

import pytest

from support.fileserver import LocalServer


@pytest.fixture
def server(tmp_path):
    (tmp_path / "www").mkdir(exist_ok=True)
    srv = LocalServer(tmp_path / "www")
    try:
        yield srv
    finally:
        srv.stop()
