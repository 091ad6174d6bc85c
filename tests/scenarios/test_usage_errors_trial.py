"""Mistakes a new user made in a trial of the whole CLI: each is a usage error (exit 2, one
message naming the option), never a traceback; ``--version`` answers."""

import subprocess
import sys

import pytest

from lemonpack import __version__


def lemonpack(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lemonpack.cli", *args], capture_output=True, text=True, timeout=60)


def test_version():
    r = lemonpack("--version")
    assert r.returncode == 0 and r.stdout == f"lemonpack {__version__}\n"


@pytest.mark.parametrize("args, option, words", [
    (["catalogue", "fetch", "http://127.0.0.1:9/x.json", "--sha256", "abc", "--out", "x"], "--sha256",
     "is not a digest"),
    (["catalogue", "fetch", "http://127.0.0.1:9/x.json", "--sha256", "a" * 64, "--out", "x"], "--sha256",
     "sha256:<64 lowercase hex digits>"),
    (["catalogue", "search", "qwen", "--kind", "bogus"], "--kind", "unknown kind 'bogus'"),
])
def test_usage_errors_exit_2(tmp_path, args, option, words):
    r = subprocess.run([sys.executable, "-m", "lemonpack.cli", *args], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert option in r.stderr and words in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x").exists()
