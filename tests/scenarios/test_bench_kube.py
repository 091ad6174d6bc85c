"""``bench/kube.py`` runs from a plain install (no pytest, no tests/support) and prints its figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NO_TEST_DEPS = ("import sys, runpy; sys.modules['pytest'] = None; sys.modules['support'] = None; "
                "sys.argv = ['kube.py', '--models', '20', '--repeat', '1']; runpy.run_path({path!r}, run_name='__main__')")


def test_kube_bench_runs_without_pytest(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LEMONPACK_BENCH_RESULTS": str(tmp_path / "RESULTS.md")}
    r = subprocess.run([sys.executable, "-c", NO_TEST_DEPS.format(path=str(ROOT / "bench" / "kube.py"))],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "kube generate, 20 models (40 objects" in r.stdout
    assert "ratio generate / baseline:" in r.stdout
    assert "the command's file equals the in-process YAML: True" in r.stdout
