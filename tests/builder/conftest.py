"""Fixtures for the build tests (helpers in :mod:`buildkit`): a per-test HTTP mirror on
127.0.0.1, a private ``LEMONPACK_CACHE_DIR``, and the CLI run in-process."""

from __future__ import annotations

import pytest

from buildkit import CliResult, Site
from lemonpack.cli import main


@pytest.fixture
def site(tmp_path):
    s = Site(tmp_path / "www")
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(autouse=True)
def build_env(tmp_path, monkeypatch):
    """A private cache; no ambient mirror, epoch or host facts; wide rich output."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(cache))
    monkeypatch.setenv("LEMONPACK_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("COLUMNS", "400")
    for var in ("LEMONPACK_MIRROR", "SOURCE_DATE_EPOCH", "LEMONPACK_HOST_FACTS"):
        monkeypatch.delenv(var, raising=False)
    return cache


@pytest.fixture
def lp(capsys):
    """``lp("build", ...)`` runs ``lemonpack.cli.main`` in-process; returns a CliResult."""
    def run(*args) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)
    return run


