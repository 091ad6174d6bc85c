"""Engine handles: spawn, probe, stop and clean up real engines (RFC section 9).

Design notes live in ``lemonpack/runtime/lifecycle/SUPERVISOR.md``. This module holds
:class:`EngineProcess` (one spawned engine) and :class:`Engines` (the driver that spawns,
probes and stops them). It builds on :mod:`~lemonpack.runtime.engines.ports` (free ports, and the
checks that tie a listening port to the engine's processes),
:mod:`~lemonpack.runtime.engines.proctable` (the process table, tags, signals, the registry of our
children), :mod:`~lemonpack.runtime.engines.containers` (container CLI calls) and
:mod:`~lemonpack.runtime.engines.sentinel` (clean-up after a crash); the driver of the supervisor is
:class:`lemonpack.runtime.lifecycle.runner.Runner`. In short:

- **Spawning** (:meth:`Engines.spawn`): ``subprocess.Popen(plan.argv, env=..., cwd=...,
  start_new_session=True)`` (never a shell), stdout+stderr into one pipe read into a
  :class:`~lemonpack.runtime.engines.logs.LogRing`. ``preexec_fn`` sets ``PR_SET_PDEATHSIG(SIGKILL)``
  so the engine dies with the runtime; because the kernel fires it when the *thread* that
  forked exits, every spawn runs on one long-lived spawner thread.
- **Tags**: each engine's environment carries ``LEMONPACK_RUNTIME_ID`` and
  ``LEMONPACK_ENGINE_ID``; descendants inherit them, even after ``setsid``.
- **Stopping** (:meth:`Engines.stop`): the plan's stop command (argv, with a timeout), then
  for a container confirm it is gone (``rm -f -t 0`` if not), then SIGTERM to every member
  (process group, session, descendants, tagged processes), a grace period, SIGKILL, and a
  wait until every member is gone (zombies reaped when they are ours).
- **Adopted orphans**: as child subreaper the runtime adopts helpers an engine daemonised
  with an emptied environment; an unregistered direct child is adopted and is ended with its
  engine (:meth:`Engines.adopted_by` says what still escapes without cgroups).
- **Ports**: checked free before every launch (:func:`~lemonpack.runtime.engines.ports.check_port_free`); a probe answer
  counts only from the engine (:meth:`Engines.owns_port`; for a container: running, and its
  processes hold the port).
- **Containers**: the runtime's labels are injected right after ``run``; before a start, a
  leftover container of the same name is removed if its owner is dead (or is us), otherwise
  the start fails; :meth:`Engines.cleanup_leftovers` removes every labelled container and
  tagged process whose runtime is dead.

Failures the runtime cannot raise (clean-up, callbacks) are logged to
``lemonpack.runtime.engines.handles``.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import cast
from concurrent.futures import ThreadPoolExecutor

from lemonpack.errors import LemonpackError, RuntimeFailure
from lemonpack.runtime.engines import probes
from lemonpack.runtime.engines.containers import (
    CONTAINER_CLIS, LABEL_ENGINE, LABEL_OWNER, LABEL_RECIPE, ContainerCLI, container_by_label, container_labels,
    container_state,
    gone_error, inject_labels, reaches_container_cli, remove_container, remove_orphan_containers, wait_container_gone,
)
from lemonpack.runtime.engines.logs import LogRing
from lemonpack.runtime.launch.plan import LaunchPlan
from lemonpack.runtime.engines.ports import check_port_free, holds_socket, listening_inodes
from lemonpack.runtime.engines.proctable import (
    ENV_ENGINE, ENV_RUNTIME, ProcInfo, adopted_orphans, descendants, environ_value, forget_child, owner_alive,
    pdeathsig_preexec, popen_child, proc_info, process_table, reap, run_child, runtime_id_of, set_child_subreaper,
    signal_group, signal_pid, table_and_own_children, tagged,
)
from lemonpack.runtime.engines.sentinel import announce_cli, start_sentinel

log = logging.getLogger("lemonpack.runtime.engines.handles")


# ---------------------------------------------------------------- one engine


class EngineProcess:
    """One spawned engine: the Popen, its logs, its exit, its tag.

    ``pid`` is the direct child's pid (the session and process-group id as well).
    ``on_exit(fn)`` registers ``fn(returncode)``, called once from a waiter thread.
    ``container_cli``: for a container engine, the CLI with the global options and ``env``
    its command line used (:class:`~lemonpack.runtime.engines.containers.ContainerCLI`), through
    which every container command about it runs (``inspect``, ``ps``, ``rm``); None for a
    process engine.
    """

    def __init__(self, plan: LaunchPlan, popen: subprocess.Popen, tag: str, logs: LogRing,
                 container_cli: ContainerCLI | None = None) -> None:
        self.plan, self.popen, self.tag, self.logs = plan, popen, tag, logs
        self.container_cli = container_cli
        self.pid = popen.pid
        info = proc_info(popen.pid)
        self.start_ticks = info.start if info else 0  # its start in clock ticks (tells adopted orphans apart)
        self.started_at = time.monotonic()
        self.ready_after: float | None = None
        self.probe_seen: list[str] = []  # what the health probe observed, repeats folded
        self.exited = threading.Event()
        self.stopping = False
        self._callbacks: list[Callable[[int], None]] = []
        self._lock = threading.Lock()
        self._reader = logs.pump(popen.stdout, name=f"log-{plan.recipe}") if popen.stdout else None
        threading.Thread(target=self._wait, name=f"wait-{self.pid}", daemon=True).start()

    @property
    def url(self) -> str:
        return self.plan.url

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(cast("Sequence[str]", self.popen.args))

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        return self.popen.poll()

    def wait_exit(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True once the child has exited."""
        return self.exited.wait(timeout)

    def on_exit(self, fn: Callable[[int], None]) -> None:
        with self._lock:
            if not self.exited.is_set():
                self._callbacks.append(fn)
                return
        fn(self.popen.returncode)

    def _wait(self) -> None:
        rc = self.popen.wait()
        forget_child(self.pid)
        with self._lock:
            self.exited.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:  # each one runs even when an earlier one fails
            try:
                fn(rc)
            except Exception:  # noqa: BLE001 (a lost exit report would leave a dead engine "ready")
                log.exception("%s: exit callback %r failed for pid %s (exit code %s)",
                              self.plan.recipe, fn, self.pid, rc)


# ---------------------------------------------------------------- the driver


class Engines:
    """Spawns, probes and stops engines; owns the spawner thread and the reaper sentinel.

    ``runtime_id`` defaults to :func:`runtime_id_of` this process. With ``subreaper`` the
    process adopts orphaned descendants (use it in a runtime process, not in a library
    host). With ``sentinel`` a reaper process cleans up after this runtime if it dies.
    ``grace`` is the seconds between SIGTERM and SIGKILL; ``stop_timeout`` bounds the
    plan's stop command; ``container_timeout`` bounds waiting for a container to be gone.
    """

    def __init__(self, *, runtime_id: str | None = None, subreaper: bool = False, sentinel: bool = False,
                 grace: float = 5.0, stop_timeout: float = 30.0, container_timeout: float = 30.0,
                 log_lines: int = 2000) -> None:
        self.runtime_id = runtime_id or runtime_id_of(os.getpid()) or str(os.getpid())
        self.grace, self.stop_timeout, self.container_timeout = grace, stop_timeout, container_timeout
        self.log_lines = log_lines
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="lemonpack-spawner")
        self._counter = itertools.count(1)
        self._live: set[EngineProcess] = set()
        self._lock = threading.Lock()
        self._clis_used: set[ContainerCLI] = set()
        self.subreaper = set_child_subreaper() if subreaper else False
        self._sentinel: subprocess.Popen | None = start_sentinel(self.runtime_id) if sentinel else None

    # -- start

    def spawn(self, plan: LaunchPlan) -> EngineProcess:
        """Start ``plan``'s process (not probed). Raises RuntimeFailure when the executable
        cannot be run, a foreign container holds ``plan.container_name``, or ``plan.port``
        is not free (checked before every launch, process or container, so that a health
        probe is never answered by a server that was there first)."""
        argv = tuple(plan.argv)
        tag = f"{self.runtime_id}/{next(self._counter)}"
        cli = None
        if plan.container_runtime or plan.container_name:
            cli = _container_cli(plan)
            self._note_cli(cli)
            if plan.container_name:  # a leftover of ours (or of a dead runtime) may hold the port too
                self._clear_container_name(cli, plan.container_name)
            argv = inject_labels(argv, {LABEL_OWNER: self.runtime_id, LABEL_RECIPE: plan.recipe, LABEL_ENGINE: tag})
        if plan.port:
            try:  # before every launch: a probe must never be answered by someone else's server
                check_port_free(plan.host, plan.port)
            except LemonpackError as e:
                raise RuntimeFailure(f"{plan.recipe}: {e}") from None
        env = {**os.environ, **plan.env, ENV_RUNTIME: self.runtime_id, ENV_ENGINE: tag}
        logs = LogRing(max_lines=self.log_lines)
        parent = os.getpid()

        def popen() -> subprocess.Popen:
            return popen_child(list(argv), env=env, cwd=plan.working_dir or None, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                          close_fds=True, preexec_fn=pdeathsig_preexec(parent))
        try:
            p = self._spawner.submit(popen).result()
        except OSError as e:
            raise RuntimeFailure(f"{plan.recipe}: cannot run {argv[0]!r}: {e.strerror or e}") from e
        eng = EngineProcess(plan, p, tag, logs, container_cli=cli)
        with self._lock:
            self._live.add(eng)
        return eng

    def owns_port(self, eng: EngineProcess) -> bool | None:
        """Whether the engine answering on ``eng.plan.port`` is ``eng``: True/False, or None
        when it cannot be told (no ``/proc``).

        - A process engine: the socket listening on the port must be held by one of
          :meth:`members`. No listener visible in this network namespace: None.
        - A container engine (:meth:`container_owns_port`): the container must exist and be
          running (``<cli> inspect``), and a listener on the port in this network namespace
          must be held by the container's processes. Readiness is tied to the container: a
          foreign process answering on the port, or a container that is not running, is False.
        """
        plan = eng.plan
        if plan.container_runtime:
            return self.container_owns_port(eng)
        if reaches_container_cli(plan.argv):  # a container CLI the plan does not name: cannot tell
            return None
        inodes = listening_inodes(plan.port)
        if not inodes:
            return None
        return holds_socket(self.members(eng), inodes)

    def container_owns_port(self, eng: EngineProcess) -> bool:
        """The container side of :meth:`owns_port`.

        With ``--network host`` (rootful podman, docker) the container's processes live in
        the host's network namespace: the listener must be held by the container's init
        (``State.Pid``), by podman's ``conmon`` (``State.ConmonPid``, which also holds the
        port reservations of ``-p`` publishing in podman 4) or by their descendants, or by a
        member of ``eng`` (the CLI client, and what inherited its tag, e.g. rootless podman's
        ``rootlessport`` forwarder). With ``-p`` publishing through NAT no host process may
        listen at all: then the container running is the whole proof, as the port was free
        when it was launched (:meth:`spawn`). A foreign listener on the port is always False.
        """
        plan = eng.plan
        cli = eng.container_cli or _container_cli(plan)
        try:
            ref = plan.container_name or container_by_label(cli, LABEL_ENGINE, eng.tag)
            state = container_state(cli, ref) if ref else None
        except (OSError, subprocess.TimeoutExpired) as e:
            log.warning("%s: cannot inspect its container: %s", plan.recipe, e)
            return False
        if not state or not state.get("Running"):
            return False
        inodes = listening_inodes(plan.port)
        if not inodes:
            return True
        table = process_table()
        roots = {int(state.get(k) or 0) for k in ("Pid", "ConmonPid")} - {0}
        return holds_socket(descendants(roots, table) | self.members(eng), inodes)

    def wait_ready(self, eng: EngineProcess, cancelled: threading.Event | None = None) -> float:
        """Run the plan's health probe against ``eng`` (see :func:`probes.wait_ready`). A
        probe answered while the port is held by a process outside ``eng`` does not count
        (:meth:`owns_port`): it came from someone else, and ``eng`` is probably about to
        exit with "address already in use"."""
        plan = eng.plan
        took = probes.wait_ready(plan.health_probe, plan.host, plan.port, eng, name=f"{plan.recipe} ({plan.model})",
                                 logs=eng.logs, cancelled=cancelled, seen=eng.probe_seen,
                                 owns_port=lambda: self.owns_port(eng))
        eng.ready_after = time.monotonic() - eng.started_at
        return took

    def start(self, plan: LaunchPlan) -> EngineProcess:
        """Spawn and probe; on failure stop everything it started and raise RuntimeFailure."""
        eng = self.spawn(plan)
        try:
            self.wait_ready(eng)
        except BaseException:
            self.stop(eng)
            raise
        return eng

    # -- stop

    def members(self, eng: EngineProcess) -> set[int]:
        """Live processes that belong to ``eng``: its process group, its session, its
        descendants, every process carrying its tag and, when this process is the child
        subreaper, the orphans it adopted from ``eng`` (:meth:`adopted_by`). A process tagged
        by *another* engine never counts (after our engine is reaped, its pid, and so a group
        or session id, may be reused)."""
        if self.subreaper:
            table, own = table_and_own_children()  # a child forked by us is registered before the table is read
        else:
            table, own = process_table(), set()
        me = os.getpid()
        out = {p for p, i in table.items() if i.pgid == eng.pid or i.sid == eng.pid}
        if eng.poll() is None:  # not reaped yet: its pid is still ours, so is its tree
            out |= descendants({eng.pid}, table) | {eng.pid}
        if self.subreaper:
            orphans = {p: i for p, i in table.items()
                       if i.ppid == me and p not in own and i.state not in ("Z", "X")}
            out |= descendants(self.adopted_by(eng, orphans), table)
        out = {p for p in out if environ_value(p, ENV_ENGINE) in (None, eng.tag)}
        out |= tagged(ENV_ENGINE, eng.tag, table)
        return {p for p in out if p != me and table.get(p) and table[p].state not in ("Z", "X")}

    def adopted_by(self, eng: EngineProcess, orphans: Mapping[int, ProcInfo]) -> set[int]:
        """Which of the adopted ``orphans`` (:func:`adopted_orphans`) are ``eng``'s.

        An orphan keeps no trace of the parent it lost, so it is attributed by time: it
        started after ``eng`` did, and no other live engine had started before it (which
        could be its real owner). One engine at a time (``lemonpack run``) is therefore
        exact; an orphan that two live engines could have made stays until the last of them
        stops, and :meth:`close` ends every adopted process.

        What this still cannot catch (a cgroup, ``cgroup.kill``, or a PID namespace would):
        a process that escapes the runtime's tree without being re-parented to it (the
        runtime is not the subreaper: a library host; or the process is handed to another
        daemon, e.g. ``systemd-run``, ``at``, D-Bus activation) *and* carries no tag (it
        emptied its environment); and a helper started by an engine within the same clock
        tick (10 ms) as another live engine, which is kept until both stop.
        """
        others = [e.start_ticks for e in self._live_engines() if e is not eng]
        return {p for p, i in orphans.items()
                if i.start >= eng.start_ticks and not any(t <= i.start for t in others)}

    def _live_engines(self) -> list[EngineProcess]:
        with self._lock:
            return list(self._live)

    def _group_alive(self, eng: EngineProcess, pids: set[int]) -> bool:
        return any((i := proc_info(p)) is not None and i.pgid == eng.pid for p in pids)

    def stop(self, eng: EngineProcess, grace: float | None = None) -> None:
        """Stop ``eng`` and everything it started; idempotent; returns once all are gone.

        Order: the plan's stop command (argv, ``stop_timeout``); for a container, confirm it
        is gone (``rm -f -t 0`` when the stop command did not remove it; a container started
        without ``--name`` is found by its ``lemonpack.engine`` label), give its CLI client
        ``grace`` seconds to exit by itself, then SIGKILL what is left (no SIGTERM: the client
        would forward it to the removed container and log an error); for a process, SIGTERM
        to every member, ``grace`` seconds, SIGKILL to what is left; wait until none is left.
        """
        grace = self.grace if grace is None else grace
        eng.stopping = True
        plan = eng.plan
        stop_argv = plan.stop_argv(eng.pid)
        if stop_argv and (eng.poll() is None or plan.container_name):
            try:
                r = run_child(stop_argv, timeout=self.stop_timeout, env={**os.environ, **plan.env})
                for line in (r.stdout + r.stderr).splitlines():
                    eng.logs.append(f"[stop] {line}")
                if r.returncode != 0 and not (plan.container_name and gone_error(r)):
                    log.warning("%s: stop command %s exited with code %s", plan.recipe, list(stop_argv), r.returncode)
            except (OSError, subprocess.TimeoutExpired) as e:
                eng.logs.append(f"[stop] stop command failed: {e}")
                log.warning("%s: stop command %s failed: %s", plan.recipe, list(stop_argv), e)
        first = signal.SIGTERM
        if plan.container_name or plan.container_runtime:
            cli = eng.container_cli or _container_cli(plan)
            if plan.container_name:
                if not wait_container_gone(cli, plan.container_name, timeout=min(2.0, self.container_timeout)):
                    remove_container(cli, plan.container_name, self.container_timeout)
            else:  # started without --name: found by the engine label spawn() put on it
                cid = container_by_label(cli, LABEL_ENGINE, eng.tag)
                if cid is not None:
                    remove_container(cli, cid, self.container_timeout)
            # The container is gone: its CLI client (`podman run`) exits by itself. A SIGTERM
            # now would be forwarded by its signal proxy to a removed container and print
            # `level=error msg="forwarding signal 15 to container ...: container has already
            # been removed"` (podman 4.3). So let it finish, then SIGKILL what is left.
            eng.exited.wait(grace)
            first = signal.SIGKILL
        self._terminate(eng, grace, first)
        with self._lock:
            self._live.discard(eng)
        if eng._reader is not None:
            eng._reader.join(timeout=1.0)

    def _terminate(self, eng: EngineProcess, grace: float, first: int = signal.SIGTERM) -> None:
        pids = self.members(eng)
        if not pids:
            eng.exited.wait(1.0)
            return
        # A member stays one until it is gone (or a zombie): a process found only by its tag
        # loses its environment, so its tag, early in its exit, before it becomes a zombie; on
        # a busy machine that moment lasts. Known by pid and start time (a reused pid is not it).
        known: dict[int, int] = {}

        def left(now: set[int]) -> set[int]:
            for p in now:
                if p not in known and (info := proc_info(p)) is not None:
                    known[p] = info.start
            return now | {p for p, start in known.items()
                          if (i := proc_info(p)) is not None and i.start == start and i.state not in ("Z", "X")}
        pids = left(pids)
        for p in pids:
            signal_pid(p, first)
        if self._group_alive(eng, pids):  # atomic for members forking right now
            signal_group(eng.pid, first)
        deadline = time.monotonic() + grace
        seen = set(pids)
        while pids and time.monotonic() < deadline:
            time.sleep(0.005)
            pids = left(self.members(eng))
            seen |= pids
        deadline = time.monotonic() + 10.0
        while pids:
            for p in pids:
                signal_pid(p, signal.SIGKILL)
            if self._group_alive(eng, pids):
                signal_group(eng.pid, signal.SIGKILL)
            time.sleep(0.005)
            reap(seen - {eng.pid})
            pids = left(self.members(eng))
            seen |= pids
            if time.monotonic() > deadline:
                raise RuntimeFailure(f"{eng.plan.recipe}: processes {sorted(pids)} survive SIGKILL")
        eng.exited.wait(5.0)
        reap(seen - {eng.pid})

    # -- housekeeping

    def cleanup_leftovers(self, container_runtimes: tuple[str | ContainerCLI, ...] = CONTAINER_CLIS) -> dict[str, list]:
        """Remove what crashed runtimes left, whatever this runtime launches next (a process
        recipe too): containers labelled ``lemonpack.owner`` by a dead runtime, for each of
        ``container_runtimes`` that is installed, and processes tagged by a dead runtime.
        Called at every start of ``lemonpack run`` (and the server). Failures of the container
        CLIs are logged (``lemonpack.runtime.engines.handles``), never raised: a clean-up must not
        prevent a launch. Returns ``{"containers": [...], "processes": [...]}``.

        Each CLI is called without global options, so this scans the *default* store (or
        host, connection) of each installed CLI only: a container a dead runtime started as
        ``podman --root /x run ...`` or ``podman --url ... run`` is not found here. (While its
        runtime lives, its own stop and its crash sentinel use the engine's full CLI prefix.)
        An entry of ``container_runtimes`` may also be an argv prefix or a
        :class:`~lemonpack.runtime.engines.containers.ContainerCLI` to scan another store."""
        gone_containers: list[str] = []
        for rt in container_runtimes:
            cli = ContainerCLI.of(rt)
            if shutil.which(cli.argv[0]):
                try:
                    gone_containers += remove_orphan_containers(cli)
                except (OSError, subprocess.TimeoutExpired) as e:
                    log.warning("cannot look for leftover containers with %s: %s", cli, e)
        owners: dict[int, str] = {}
        for p in process_table():
            rid = environ_value(p, ENV_RUNTIME)
            if rid and rid != self.runtime_id and not owner_alive(rid):
                owners[p] = rid
        for p in owners:
            signal_pid(p, signal.SIGKILL)
        if owners:
            log.info("killed leftover processes %s of dead runtimes", sorted(owners))
        return {"containers": gone_containers, "processes": sorted(owners)}

    def close(self) -> None:
        """Stop every live engine, then end the spawner thread and the sentinel."""
        with self._lock:
            live = list(self._live)
        for eng in live:
            self.stop(eng)
        if self.subreaper:
            self._end_adopted()
        self._spawner.shutdown(wait=True)
        if self._sentinel is not None:
            try:
                if self._sentinel.stdin is not None:
                    self._sentinel.stdin.close()
            except OSError:
                pass
            self._sentinel = None

    def _end_adopted(self, grace: float | None = None) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds, every adopted orphan and its
        descendants (called once no engine is left that could own them); zombies reaped."""
        grace = self.grace if grace is None else grace

        def tree() -> set[int]:
            orphans = adopted_orphans()
            table = process_table()
            return {p for p in descendants(orphans, table) if table[p].state not in ("Z", "X")}
        pids = tree()
        if not pids:
            return
        log.info("ending processes adopted from engines: %s", sorted(pids))
        seen = set(pids)
        for p in pids:
            signal_pid(p, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            time.sleep(0.005)
            reap(seen)
            pids = tree()
            seen |= pids
        deadline = time.monotonic() + 10.0
        while pids and time.monotonic() < deadline:
            for p in pids:
                signal_pid(p, signal.SIGKILL)
            time.sleep(0.005)
            reap(seen)
            pids = tree()
            seen |= pids
        if pids:
            log.warning("adopted processes %s survive SIGKILL", sorted(pids))

    def _note_cli(self, cli: ContainerCLI) -> None:
        """Announce ``cli`` to the sentinel once, before its first container starts."""
        if cli not in self._clis_used:
            self._clis_used.add(cli)
            if self._sentinel is not None:
                announce_cli(self._sentinel, cli)

    def _clear_container_name(self, cli: ContainerCLI, name: str) -> None:
        labels = container_labels(cli, name)
        if labels is None:
            return
        owner = labels.get(LABEL_OWNER)
        if owner and (owner == self.runtime_id or not owner_alive(owner)):
            remove_container(cli, name, self.container_timeout)
            return
        if wait_container_gone(cli, name, timeout=self.container_timeout):  # e.g. a --rm still finishing
            return
        raise RuntimeFailure(f"a container named {name} already exists and is not ours "
                             f"(owner {owner or 'unknown'}); remove it with `{cli.command('rm', '-f', name)}`")


def _container_cli(plan: LaunchPlan) -> ContainerCLI:
    """The container CLI of ``plan``: its argv's CLI with the global options it was given
    and the plan's env (:meth:`~lemonpack.runtime.engines.containers.ContainerCLI.for_argv`), or
    ``plan.container_runtime`` (else ``argv[0]``) alone when the argv cannot be read."""
    fallback = plan.container_runtime or plan.argv[0]
    return ContainerCLI.for_argv(plan.argv, plan.env, fallback=fallback) or ContainerCLI.of(fallback)


__all__ = ["EngineProcess", "Engines"]
