"""One sandboxed lemonpack home per test: the ``home`` fixture (registered in tests/conftest.py).

lemonpack keeps its state under two roots (:mod:`lemonpack.paths`): the cache
(``$LEMONPACK_CACHE_DIR``: artifacts, layers, installed engines) and the config
(``$LEMONPACK_CONFIG_DIR``: ``backends/``, ``user_models.json``). ``home`` points both into the
test's ``tmp_path`` and clears the variables that would let the machine's own settings in
(a mirror, an epoch, injected host facts, a forced backend, a search path), so a test never reads
or writes the user's files and gets the same answers on every machine. The variables are set
with ``monkeypatch``: in-process calls (``lemonpack.cli.main``) and child processes started
from ``os.environ`` both see them, and pytest restores the environment after the test.

A test asks for more when it needs it: ``home.host(...)`` injects host facts,
``home.search_path(...)`` replaces discovery's search path, ``home.model()`` writes a model file.

Every test is isolated even without ``home``: :func:`isolated_dirs` (autouse, registered in
tests/conftest.py) points :data:`ISOLATED` (lemonpack's two roots and the XDG base directories)
at fresh directories of the test's own, and :func:`isolate_session` does the same once for the
whole run (session fixtures, ``pytest_configure``), so nothing a test or a fixture starts writes
into the user's ``~/.cache/lemonpack`` (``blob-locations.json`` and the layer cache were) or
reads the user's ``~/.config/lemonpack``. A test that must see the real directories says so
with ``@pytest.mark.real_dirs``. ``XDG_RUNTIME_DIR`` is left alone: root podman keeps its
runtime state there.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Variables of the machine that would change what lemonpack does; ``home`` removes them.
AMBIENT = ("LEMONPACK_MIRROR", "SOURCE_DATE_EPOCH", "LEMONPACK_HOST_FACTS", "LEMONPACK_BACKEND",
           "LEMONPACK_BACKENDS_PATH")

#: What :func:`isolated_dirs` points at a test's own directories: lemonpack's cache and config
#: roots (:mod:`lemonpack.paths`) and the XDG base directories their defaults and other tools
#: (platformdirs, Nix, Chromium) derive from.
ISOLATED = ("LEMONPACK_CACHE_DIR", "LEMONPACK_CONFIG_DIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
            "XDG_STATE_HOME")

#: The host facts most tests run on (``LEMONPACK_HOST_FACTS``): Linux with a CPU only.
CPU_HOST = {"os": "linux", "accelerators": ["cpu"]}


@dataclass
class Home:
    """A private lemonpack home under ``root`` (the test's ``tmp_path``).

    ``cache`` and ``config`` are the two roots (not created: lemonpack creates them as it
    would on a fresh machine); ``backends`` is the user descriptor directory of the default
    search path (``<config>/backends``)."""

    root: Path
    cache: Path
    config: Path
    monkeypatch: pytest.MonkeyPatch

    @property
    def backends(self) -> Path:
        return self.config / "backends"

    def host(self, facts: dict | None = None) -> None:
        """Inject host facts (``LEMONPACK_HOST_FACTS``; RFC section 9's OS, accelerators, GPU
        archs): ``facts`` as a dict, :data:`CPU_HOST` when omitted."""
        self.monkeypatch.setenv("LEMONPACK_HOST_FACTS", json.dumps(CPU_HOST if facts is None else facts))

    def search_path(self, *entries: str | Path) -> list[Path]:
        """Replace discovery's search path (``LEMONPACK_BACKENDS_PATH``) by ``entries``, in order:
        a directory (a ``Path``, created mode 0755 so discovery's trust checks pass) or a word of
        the variable's syntax (``"user"``, ``"system"``, ``"user:/dir"``). No entries: an empty
        search path. Returns the directories given as paths."""
        dirs = [e for e in entries if isinstance(e, Path)]
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o755)
        self.monkeypatch.setenv("LEMONPACK_BACKENDS_PATH", os.pathsep.join(str(e) for e in entries))
        return dirs

    def model(self, name: str = "tiny.gguf", data: bytes = b"GGUF") -> Path:
        """A model file ``root/name`` holding ``data`` (a GGUF magic is enough for launch plans)."""
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path


def make_home(root: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    """Point lemonpack's cache and config roots into ``root`` and clear :data:`AMBIENT`;
    ``COLUMNS`` is wide so that no message a test reads is wrapped."""
    home = Home(root, root / "cache", root / "config", monkeypatch)
    monkeypatch.setenv("LEMONPACK_CACHE_DIR", str(home.cache))
    monkeypatch.setenv("LEMONPACK_CONFIG_DIR", str(home.config))
    monkeypatch.setenv("COLUMNS", "400")
    for var in AMBIENT:
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    """A sandboxed lemonpack home in ``tmp_path`` (:func:`make_home`)."""
    return make_home(tmp_path, monkeypatch)


def _isolated(root: Path) -> dict[str, str]:
    """:data:`ISOLATED` -> a directory under ``root`` each (not created: lemonpack and the tools
    create them as on a fresh machine)."""
    return {var: str(root / var.lower()) for var in ISOLATED}


def isolate_session() -> Path:
    """Point :data:`ISOLATED` at a fresh temporary directory for the whole test session (what
    session fixtures and ``pytest_configure`` see, before any test's :func:`isolated_dirs`);
    called once from ``pytest_configure`` (tests/conftest.py). Returns that directory."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="lp-test-dirs-"))
    os.environ.update(_isolated(root))
    return root


@pytest.fixture(autouse=True)
def isolated_dirs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test (autouse): :data:`ISOLATED` pointed at directories of its own, outside its
    ``tmp_path`` (a test may list that), restored afterwards; ``home`` and a test's own
    ``monkeypatch.setenv`` still win (they run later). ``@pytest.mark.real_dirs`` opts out: the
    test sees the session's directories (:func:`isolate_session`), still not the user's."""
    if request.node.get_closest_marker("real_dirs") is not None:
        return
    for var, value in _isolated(tmp_path_factory.mktemp("dirs")).items():
        monkeypatch.setenv(var, value)
