"""The one set of fixtures of the suite: every fixture a test takes is defined here or in a
module of tests/support/ and registered here (there is no conftest.py in another folder), so a
test file can move between tests/<room>/ and tests/scenarios/ without losing one.

- a sandboxed lemonpack home: ``home`` (:mod:`support.home`); and for every test, autouse,
  ``isolated_dirs``: lemonpack's cache and config roots and the XDG directories of its own
  (``@pytest.mark.real_dirs`` opts out), the session's set once in ``pytest_configure``;
- recipes to mutate: ``passthrough``, ``variant`` (:mod:`support.recipes`, the one recipe builder);
- real servers and tools: ``server`` (below), ``site`` and ``lp`` (:mod:`support.buildkit`), ``registry``,
  ``auth_registry``, ``token_registry``, ``example_layout`` (:mod:`support.registry`), ``podman_conf``,
  ``podman_env`` (:mod:`support.containers`), ``debian_layout`` (:mod:`support.debian_base`),
  ``nix_installed`` and ``require_tool`` (below);
- room-shaped worlds: ``tree`` (:mod:`support.extensions`), ``kube_env`` (:mod:`support.kube`),
  ``live`` (:mod:`support.serve`), ``trust_world`` (:mod:`support.trust`).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from support.buildkit import lp, site  # noqa: F401 (the build tests' mirror and in-process CLI)
from support.containers import podman_conf, podman_env  # noqa: F401 (fixtures for every folder)
from support.debian_base import debian_layout  # noqa: F401 (a real Debian base image, session-scoped)
from support.extensions import tree  # noqa: F401 (a private copy of the extension tree)
from support.fileserver import LocalServer
from support.home import home, isolate_session, isolated_dirs  # noqa: F401 (the sandboxed home; isolation)
from support.kube import kube_env  # noqa: F401 (discovery, registry and model files for kube)
from support.recipes import PASSTHROUGH, VARIANT
from support.registry import auth_registry, example_layout, registry, token_registry  # noqa: F401 (docker-registry)
from support.registry import install_registries_conf
from support.tls import tls_files, tls_registry  # noqa: F401 (a self-signed CA and a TLS docker-registry)
from support.serve import live  # noqa: F401 (a real lemonpack serve in a thread)
from support.trust import trust_world  # noqa: F401 (signed and unsigned images for the trust policy)
from support.collection import uncollected_test_files
from support.tools import need


def pytest_configure(config):
    """The session's containers-registries.conf(5): local plain-http registries are declared
    ``insecure = true`` in it (:func:`support.registry.install_registries_conf`); the session's
    lemonpack and XDG directories, never the user's (:func:`support.home.isolate_session`)."""
    config.stash[_REGISTRIES_CONF] = install_registries_conf()
    config.stash[_SESSION_DIRS] = isolate_session()


_SESSION_DIRS = pytest.StashKey[Path]()
_REGISTRIES_CONF = pytest.StashKey[Path]()


def pytest_unconfigure(config):
    """The session's lemonpack and XDG directories, and its registries.conf's directory, go with
    the session."""
    import shutil

    root = config.stash.get(_SESSION_DIRS, None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
    conf = config.stash.get(_REGISTRIES_CONF, None)
    if conf is not None:
        shutil.rmtree(conf.parent, ignore_errors=True)


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


@pytest.fixture
def require_tool():
    """``require_tool("skopeo")`` fails the test, naming the apt package, when the tool is missing."""
    return need


@pytest.fixture
def passthrough() -> dict:
    """A fresh copy of the smallest valid passthrough recipe (:data:`support.recipes.PASSTHROUGH`)."""
    return copy.deepcopy(PASSTHROUGH)


@pytest.fixture
def variant() -> dict:
    """A fresh copy of the smallest valid ``variant_of`` recipe (:data:`support.recipes.VARIANT`)."""
    return copy.deepcopy(VARIANT)


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
