"""Fixtures shared by every test folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.containers import podman_conf, podman_env  # noqa: F401 (fixtures for every folder)
from support.debian_base import debian_layout  # noqa: F401 (a real Debian base image, session-scoped)
from support.fileserver import LocalServer
from support.registry import auth_registry, registry, token_registry  # noqa: F401 (real docker-registry fixtures)
from support.collection import uncollected_test_files
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



# --- every test file under tests/ must be collected -------------------------------------------
# pytest skips some directories by default (``norecursedirs`` holds ``build``, ``dist``, ``*.egg``,
# dot-directories ...): once a whole folder of tests (tests/build/) went unrun that way. When a run
# covers the whole suite (no path arguments, or ``tests``), a test file on disk that no collector
# reached fails the run. Marker and keyword selection do not matter: modules are still collected.

_TESTS = Path(__file__).resolve().parent
_collected_modules: set[Path] = set()


def pytest_collectreport(report):
    """Record every module a collector reached (its node id is the file's path from the rootdir)."""
    path = report.nodeid.split("::")[0]
    if path.endswith(".py"):
        _collected_modules.add((_TESTS.parent / path).resolve())


def pytest_collection_finish(session):
    whole = all(Path(a).resolve() in (_TESTS, _TESTS.parent) for a in session.config.args)
    if not whole:
        return
    missing = uncollected_test_files(_collected_modules, _TESTS)
    if missing:
        raise pytest.UsageError(
            "test files on disk that this run did not collect (norecursedirs? a name clash?):\n  "
            + "\n  ".join(str(p.relative_to(_TESTS.parent)) for p in missing))
