"""A runtime killed outright (SIGKILL) leaves nothing behind: its engine dies by the
parent-death signal, escaped grandchildren and containers are removed by the sentinel. A
runtime stopped normally also ends the orphans it adopted as child subreaper (case 10)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from support.helpers import RunProcess, all_gone, read_pids, wait_for
from support.recipes import FAKE_ENGINE, recipe_doc, write_recipe

from lemonpack.runtime.engines.proctable import ENV_RUNTIME, pid_alive, process_table, environ_value


def test_sigkilled_runtime_leaves_no_engine_behind(tmp_path):
    pids = tmp_path / "pids"
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=["--fork-child", "--grandchild", "--ignore-sigterm", "--pid-file", str(pids)]))
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


def _children(pid: int) -> list[int]:
    return [p for p, i in process_table().items() if i.ppid == pid and pid_alive(p)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_case10_a_helper_adopted_by_the_runtime_is_ended_on_stop(tmp_path, sig):
    # case 10: the engine's start script daemonises a helper in a new session with an
    # emptied environment (no tag, not in the engine's group, session or tree); the runtime,
    # child subreaper, adopts it. Stopping the runtime must end it too.
    marker = str(1000 + int.from_bytes(os.urandom(2), "big"))  # a sleep only this test starts
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(f"#!/bin/sh\nsetsid -f env -i /bin/sleep {marker}\nexec {sys.executable} {FAKE_ENGINE} \"$@\"\n")
    wrapper.chmod(0o755)
    recipe = write_recipe(tmp_path / "fake.json", recipe_doc(fake_engine=[]))
    doc = json.loads(recipe.read_text())
    cpu = doc["platforms"]["linux"]["cpu"]
    cpu["command"], cpu["args"] = str(wrapper), cpu["args"][1:]
    recipe.write_text(json.dumps(doc))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    run = RunProcess([str(recipe), "--model", str(model), "--quiet"],
                     {"LEMONPACK_CACHE_DIR": str(tmp_path / "c"), "LEMONPACK_CONFIG_DIR": str(tmp_path / "f")})
    assert run.wait_line("ready: "), run.err

    def helper() -> list[int]:
        return [p for p in _children(run.proc.pid)
                if Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[:2] == [b"/bin/sleep", marker.encode()]]
    assert wait_for(lambda: helper(), 5), "the helper was not adopted by the runtime"
    (pid,) = helper()
    assert environ_value(pid, ENV_RUNTIME) is None  # untagged: only adoption can find it
    os.kill(run.proc.pid, sig)
    assert run.finish() == 128 + sig, run.err
    assert not pid_alive(pid), f"adopted helper {pid} survived the stop"
