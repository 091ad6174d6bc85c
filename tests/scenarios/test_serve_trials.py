"""The serve trials of issue 27 (cases 78 to 84: an engine SIGKILLed mid-stream, a ready
engine SIGKILLed that must leave a log line, a gateway endpoint SIGSTOPped, 1,100 idle
connections at ``ulimit -n 1024``, one model file spelled four ways, SIGTERM then SIGINT with
a long stream, a model removed while it streams), run from the outside against ``lemonpack serve``
as an operator would: each ``serve_trials/*/check.py`` (copied from the trials; their harness,
fake engine and recipe writer are tests/support/trial_harness.py, trial_engine.py and
trial_recipe.py) prints PASS or FAIL."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TRIALS = Path(__file__).parent / "serve_trials"
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(p.name for p in TRIALS.iterdir() if p.is_dir() and p.name[0].isdigit()))
def test_serve_trial(case, tmp_path):
    assert shutil.which("lemonpack"), "lemonpack must be on PATH"
    path = os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])  # support.*
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": path,
           "LEMONPACK_HOST_FACTS": '{"os":"linux","accelerators":["cpu"]}'}
    r = subprocess.run([sys.executable, str(TRIALS / case / "check.py")], capture_output=True, text=True, env=env,
                       timeout=150, stdin=subprocess.DEVNULL, cwd=TRIALS / case)
    lines = r.stdout.splitlines()
    assert any(ln.startswith("PASS") for ln in lines) and not any(ln.startswith("FAIL") for ln in lines), \
        r.stdout[-3000:] + r.stderr[-2000:]
