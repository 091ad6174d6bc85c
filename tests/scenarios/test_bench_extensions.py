"""bench/extensions.py runs from a plain install (no pytest, no tests/support) and prints its
figures; tiny sizes (the figures themselves are the benchmark's job, not a test's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

NO_TEST_DEPS = ("import sys, runpy; sys.modules['pytest'] = None; sys.modules['support'] = None; "
                "sys.argv = ['extensions.py', '--extensions', '30', '--files', '30', '--repeat', '1', "
                "'--include-check', '3']; "
                "runpy.run_path({path!r}, run_name='__main__')")


def test_extensions_bench_runs_without_pytest(tmp_path):
    r = subprocess.run([sys.executable, "-c", NO_TEST_DEPS.format(path=str(ROOT / "bench" / "extensions.py"))],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path,
                       env={**os.environ, "LEMONPACK_BENCH_RESULTS": str(tmp_path / "RESULTS.md")})
    assert r.returncode == 0, r.stderr
    assert "pipeline, 30 community + 8 official extensions" in r.stdout, r.stdout
    assert "include check (g++ -E -dI -MD, judged), 3 community extensions" in r.stdout, r.stdout
    assert "probing, 30 GGUF headers" in r.stdout and "10 chosen, 20 no provider" in r.stdout, r.stdout
    assert "150,000-token vocabulary" in r.stdout
