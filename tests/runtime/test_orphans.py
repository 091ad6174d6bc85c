"""A runtime killed outright (SIGKILL) leaves nothing behind: its engine dies by the
parent-death signal, escaped grandchildren and containers are removed by the sentinel."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.helpers import RunProcess, all_gone, fake_recipe, read_pids, wait_for  # noqa: E402

from lemonpack.runtime.engines import ENV_RUNTIME, pid_alive, process_table, environ_value  # noqa: E402


def test_sigkilled_runtime_leaves_no_engine_behind(tmp_path):
    pids = tmp_path / "pids"
    recipe = fake_recipe(tmp_path / "fake.json", "--fork-child", "--grandchild", "--ignore-sigterm",
                         "--pid-file", str(pids))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    run = RunProcess([str(recipe), "--model", str(model), "--quiet"],
                     {"LEMONPACK_CACHE_DIR": str(tmp_path / "c"), "LEMONPACK_CONFIG_DIR": str(tmp_path / "f")})
    assert run.wait_line("ready: "), run.err
    procs = read_pids(pids)
    assert len(procs) == 3 and all(pid_alive(p) for p in procs.values())
    os.kill(run.proc.pid, signal.SIGKILL)
    run.finish()
    assert wait_for(lambda: all_gone(procs.values()), 5), {r: p for r, p in procs.items() if pid_alive(p)}
    # and no process tagged with that runtime survives
    assert not [p for p in process_table() if environ_value(p, ENV_RUNTIME) and
                environ_value(p, ENV_RUNTIME).startswith(f"{run.proc.pid}-") and pid_alive(p)]
