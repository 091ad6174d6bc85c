"""The lifecycle benchmark runs from a plain install: no pytest, no tests/support imports.

slow: it measures real starts and stops (one run each, and the podman figure).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

# pytest and the test support made unimportable, as in `pip install -e .` without test extras
NO_TEST_DEPS = ("import sys, runpy; sys.modules['pytest'] = None; sys.modules['support'] = None; "
                "sys.argv = ['lifecycle.py', '--runs', '1']; runpy.run_path({path!r}, run_name='__main__')")


def test_lifecycle_bench_runs_without_pytest(tmp_path):
    import os

    env = {**os.environ, "CONTAINERS_CONF": str(ROOT / "tests" / "containers.conf"),
           "LEMONPACK_BENCH_RESULTS": str(tmp_path / "RESULTS.md")}  # not over the real figures
    r = subprocess.run([sys.executable, "-c", NO_TEST_DEPS.format(path=str(ROOT / "bench" / "lifecycle.py"))],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert "added by the runtime:" in r.stdout and "stop to gone, process + child + grandchild:" in r.stdout
    assert "stop to gone, container (podman rm, ps -a):" in r.stdout, r.stdout  # podman is part of the suite
    images = subprocess.run(["podman", "images", "--format", "{{.Repository}}"], capture_output=True, text=True,
                            env=env, timeout=60).stdout
    assert "lemonpack-bench-" not in images  # its image was removed
