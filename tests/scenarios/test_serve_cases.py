"""The serve cases (two models cut each other, disconnects, in-flight slots, load options,
deep JSON, huge names), run from the outside against ``lemonpack serve`` as a new user would:
each ``serve_cases/*/check.py`` (copied from the trials; their harness and fake engine are
tests/support/serve_harness.py and serve_fake_engine.py) prints PASS or FAIL."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CASES = Path(__file__).parent / "serve_cases"


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(p.name for p in CASES.iterdir() if p.is_dir() and p.name[0].isdigit()))
def test_serve_case(case, tmp_path):
    assert shutil.which("lemonpack"), "lemonpack must be on PATH"
    env = {**os.environ, "TMPDIR": str(tmp_path), "LEMONPACK_HOST_FACTS": '{"os":"linux","accelerators":["cpu"]}'}
    r = subprocess.run([sys.executable, str(CASES / case / "check.py")], capture_output=True, text=True, env=env,
                       timeout=240, stdin=subprocess.DEVNULL)
    lines = r.stdout.splitlines()
    assert any(ln.startswith("PASS") for ln in lines) and not any(ln.startswith("FAIL") for ln in lines), \
        r.stdout[-3000:] + r.stderr[-2000:]
