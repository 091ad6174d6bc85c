"""The crash sentinel: clean up after a runtime that dies, however it dies (SIGKILL included).

Design notes: ``SUPERVISOR.md`` next to this file ("When the runtime itself dies").

The runtime (:class:`lemonpack.runtime.engines.Engines` with ``sentinel=True``) starts
``python -m lemonpack.runtime.sentinel reap <runtime-id>`` (:func:`start_sentinel`) in its own
session, untagged, with stdin a pipe whose write end only the runtime holds. Before its first
container starts, the runtime announces the container CLI on that pipe (:func:`announce_cli`).
When the runtime ends, the sentinel (:func:`reaper_main`) reads EOF, removes every container
labelled ``lemonpack.owner=<runtime-id>`` with each announced CLI, and SIGKILLs every process
tagged ``LEMONPACK_RUNTIME_ID=<runtime-id>``. After a clean exit it finds nothing to do.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys

from lemonpack.runtime.containers import remove_orphan_containers
from lemonpack.runtime.proctable import ENV_ENGINE, ENV_RUNTIME, kill_tagged, popen_child

log = logging.getLogger("lemonpack.runtime.sentinel")


def start_sentinel(runtime_id: str) -> subprocess.Popen:
    """Start the reaper sentinel: its own session, no tag, stdin a pipe only we hold."""
    env = {k: v for k, v in os.environ.items() if k not in (ENV_RUNTIME, ENV_ENGINE)}
    return popen_child([sys.executable, "-m", "lemonpack.runtime.sentinel", "reap", runtime_id],
                       stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True, env=env,
                       close_fds=True)  # stderr inherited: what it fails to clean up is said there


def announce_cli(sentinel: subprocess.Popen, runtime: str) -> None:
    """Tell ``sentinel`` (from :func:`start_sentinel`) that container CLI ``runtime`` is in use
    (one line ``runtime <cli>``); a sentinel that is gone is ignored."""
    if sentinel.stdin:
        try:
            sentinel.stdin.write(f"runtime {runtime}\n".encode())
            sentinel.stdin.flush()
        except OSError:
            pass


def reaper_main(runtime_id: str) -> int:
    """The sentinel: wait for EOF on stdin (the runtime is gone, however it ended), then
    remove containers labelled with ``runtime_id`` and kill every process tagged with it.
    Lines ``runtime <cli>`` on stdin name the container CLIs in use (announced before the
    first container starts), so a run without containers never calls podman."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="lemonpack sentinel: %(levelname)s: %(message)s")
    runtimes: set[str] = set()
    for line in sys.stdin.buffer:
        parts = line.decode("utf-8", "replace").split()
        if len(parts) == 2 and parts[0] == "runtime":
            runtimes.add(parts[1])
    for rt in sorted(runtimes):
        if shutil.which(rt):
            try:
                remove_orphan_containers(rt, only_owner=runtime_id)
            except (OSError, subprocess.TimeoutExpired) as e:
                log.warning("cannot remove the containers of runtime %s with %s: %s", runtime_id, rt, e)
    kill_tagged(ENV_RUNTIME, runtime_id)
    return 0


__all__ = ["announce_cli", "reaper_main", "start_sentinel"]

if __name__ == "__main__":  # the sentinel: python -m lemonpack.runtime.sentinel reap <runtime-id>
    if len(sys.argv) == 3 and sys.argv[1] == "reap":
        sys.exit(reaper_main(sys.argv[2]))
    sys.exit("usage: python -m lemonpack.runtime.sentinel reap RUNTIME_ID")
