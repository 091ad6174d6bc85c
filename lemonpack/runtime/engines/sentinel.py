"""The crash sentinel: clean up after a runtime that dies, however it dies (SIGKILL included).

Design notes: ``lemonpack/runtime/lifecycle/SUPERVISOR.md`` ("When the runtime itself dies").

The runtime (:class:`lemonpack.runtime.engines.handles.Engines` with ``sentinel=True``) starts
``python -m lemonpack.runtime.engines.sentinel reap <runtime-id>`` (:func:`start_sentinel`) in its own
session, untagged, with stdin a pipe whose write end only the runtime holds. Before its first
container starts, the runtime announces the container CLI on that pipe (:func:`announce_cli`:
the program, the global options and the env the engine's command line used, so the sentinel
looks in the same store, host or connection). When the runtime ends, the sentinel
(:func:`reaper_main`) reads EOF, removes every container labelled
``lemonpack.owner=<runtime-id>`` with each announced CLI, and SIGKILLs every process tagged
``LEMONPACK_RUNTIME_ID=<runtime-id>``. After a clean exit it finds nothing to do.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys

from lemonpack.runtime.engines.containers import ContainerCLI, remove_orphan_containers
from lemonpack.runtime.engines.proctable import ENV_ENGINE, ENV_RUNTIME, kill_tagged, popen_child

log = logging.getLogger("lemonpack.runtime.engines.sentinel")


def start_sentinel(runtime_id: str) -> subprocess.Popen:
    """Start the reaper sentinel: its own session, no tag, stdin a pipe only we hold."""
    env = {k: v for k, v in os.environ.items() if k not in (ENV_RUNTIME, ENV_ENGINE)}
    return popen_child([sys.executable, "-m", "lemonpack.runtime.engines.sentinel", "reap", runtime_id],
                       stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True, env=env,
                       close_fds=True)  # stderr inherited: what it fails to clean up is said there


def announce_cli(sentinel: subprocess.Popen, cli: ContainerCLI) -> None:
    """Tell ``sentinel`` (from :func:`start_sentinel`) that container CLI ``cli`` is in use:
    one line ``cli {"argv": [...], "env": {...}}`` (JSON: arguments may hold spaces); a
    sentinel that is gone is ignored."""
    if sentinel.stdin:
        line = json.dumps({"argv": list(cli.argv), "env": dict(cli.env)})
        try:
            sentinel.stdin.write(f"cli {line}\n".encode())
            sentinel.stdin.flush()
        except OSError:
            pass


def reaper_main(runtime_id: str) -> int:
    """The sentinel: wait for EOF on stdin (the runtime is gone, however it ended), then
    remove containers labelled with ``runtime_id`` and kill every process tagged with it.
    Lines ``cli <json>`` on stdin (:func:`announce_cli`) name the container CLIs in use
    (announced before the first container starts), so a run without containers never calls
    podman; a line that cannot be read is ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="lemonpack sentinel: %(levelname)s: %(message)s")
    clis: set[ContainerCLI] = set()
    for line in sys.stdin.buffer:
        kind, _, data = line.decode("utf-8", "replace").strip().partition(" ")
        if kind != "cli":
            continue
        try:
            doc = json.loads(data)
            cli = ContainerCLI(tuple(str(a) for a in doc["argv"]),
                               tuple(sorted((str(k), str(v)) for k, v in doc.get("env", {}).items())))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        if cli.argv:
            clis.add(cli)
    for cli in sorted(clis, key=lambda c: (c.argv, c.env)):
        if shutil.which(cli.argv[0]):
            try:
                remove_orphan_containers(cli, only_owner=runtime_id)
            except (OSError, subprocess.TimeoutExpired) as e:
                log.warning("cannot remove the containers of runtime %s with %s: %s", runtime_id, cli, e)
    kill_tagged(ENV_RUNTIME, runtime_id)
    return 0


__all__ = ["announce_cli", "reaper_main", "start_sentinel"]

if __name__ == "__main__":  # the sentinel: python -m lemonpack.runtime.engines.sentinel reap <runtime-id>
    if len(sys.argv) == 3 and sys.argv[1] == "reap":
        sys.exit(reaper_main(sys.argv[2]))
    sys.exit("usage: python -m lemonpack.runtime.engines.sentinel reap RUNTIME_ID")
