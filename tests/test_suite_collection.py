"""The whole suite runs: a test file that pytest would not collect fails the run (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.collection import uncollected_test_files

ROOT = Path(__file__).resolve().parents[1]


def test_a_file_no_collector_reached_is_reported(tmp_path):
    for rel in ("build/test_hidden.py", "runtime/test_seen.py", "runtime/helper_test.py", "support/helpers.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    seen = {(tmp_path / "runtime/test_seen.py").resolve()}
    assert uncollected_test_files(seen, tmp_path) == [(tmp_path / "build/test_hidden.py").resolve(),
                                                     (tmp_path / "runtime/helper_test.py").resolve()]


def test_every_test_file_of_the_repository_is_collected():
    """pytest's own collection of tests/ reaches every test file on disk (tests/builder/ among them)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    files = {line.split("::")[0] for line in proc.stdout.splitlines() if "::" in line}
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")}
    assert on_disk <= files, sorted(on_disk - files)
    assert any(f.startswith("tests/builder/") for f in files)
