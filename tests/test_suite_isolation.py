"""No test run writes into the user's own lemonpack directories (``~/.cache/lemonpack``,
``~/.config/lemonpack``) or XDG directories: tests/conftest.py points them at directories of
the session and of each test (tests/support/home.py ``isolated_dirs``, ``isolate_session``).

The two probes below write what code under test writes when no fixture asks for a home (the
registry client's ``blob-locations.json``, the model registry, a platformdirs cache file); the
last test runs them in a child pytest whose ``HOME`` is a fresh directory, with none of the
variables set, and fails when anything lands under that home."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.home import ISOLATED

ROOT = Path(__file__).resolve().parents[1]
DIGEST = "sha256:" + "0f" * 32


def _write_like_code_under_test() -> None:
    """Write where lemonpack and platformdirs put things, after checking that none of it is
    under the home directory (so an isolation that broke fails here and pollutes nothing)."""
    import platformdirs

    from lemonpack import paths
    from lemonpack.registry.blobinfo import BlobLocations
    from lemonpack.runtime.models.registry import ModelRegistry

    tool = Path(platformdirs.user_cache_dir("lemonpack-probe"))
    targets = [paths.cache_root() / "blob-locations.json", paths.config_root() / "user_models.json", tool / "x"]
    inside_home = [str(p) for p in targets if p.is_relative_to(Path.home())]
    assert not inside_home, f"a test would write into the user's home: {inside_home}"
    known = BlobLocations("probe.example")
    known.record(DIGEST, "probe/repo")
    known.save()
    ModelRegistry().add("user.probe", "llamacpp", {"main": "/models/probe.gguf"})
    tool.mkdir(parents=True, exist_ok=True)
    (tool / "x").write_text("x")
    assert all(p.is_file() for p in targets), targets


def test_probe_writes_into_the_tests_own_directories():
    _write_like_code_under_test()


@pytest.mark.real_dirs
def test_probe_opted_out_writes_into_the_sessions_directories():
    _write_like_code_under_test()


def test_a_test_run_writes_nothing_into_the_users_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    tmp = tmp_path / "tmp"  # the child's temporary directory: the session's files in it go with it
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ISOLATED}
    env.update(HOME=str(home), TMPDIR=str(tmp), LEMONPACK_TEST_CACHE=os.environ.get("LEMONPACK_TEST_CACHE")
               or str(Path.home() / ".cache" / "lemonpack-test"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"{Path(__file__).relative_to(ROOT)}::test_probe_writes_into_the_tests_own_directories",
                           f"{Path(__file__).relative_to(ROOT)}::test_probe_opted_out_writes_into_the_sessions_directories"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert not written, f"a test run wrote into the user's home: {written}\n{proc.stdout[-2000:]}"
    # the probes refuse to write under the home before they write: a failed probe is a leak too
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    left = sorted(p.name for p in tmp.iterdir() if not p.name.startswith("pytest-of-"))  # pytest keeps its basetemp
    assert not left, f"a test run left temporary files behind (registries.conf, session dirs): {left}"
