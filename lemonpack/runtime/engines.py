"""The thin effects layer: spawn, probe, stop and clean up real engines (RFC section 9).

Design notes live in ``SUPERVISOR.md`` next to this file. In short:

- **Spawning** (:meth:`Engines.spawn`): ``subprocess.Popen(plan.argv, env=..., cwd=...,
  start_new_session=True)`` (never a shell), stdout+stderr into one pipe read into a
  :class:`~lemonpack.runtime.logs.LogRing`. ``preexec_fn`` sets ``PR_SET_PDEATHSIG(SIGKILL)``
  so the engine dies with the runtime; because the kernel fires it when the *thread* that
  forked exits, every spawn runs on one long-lived spawner thread.
- **Tags**: each engine's environment carries ``LEMONPACK_RUNTIME_ID`` and
  ``LEMONPACK_ENGINE_ID``; descendants inherit them, even after ``setsid``.
- **Stopping** (:meth:`Engines.stop`): the plan's stop command (argv, with a timeout), then
  for a container confirm it is gone (``rm -f -t 0`` if not), then SIGTERM to every member
  (process group, session, descendants, tagged processes), a grace period, SIGKILL, and a
  wait until every member is gone (zombies reaped when they are ours).
- **Runtime death**: a sentinel process (:func:`reaper_main`) holds the read end of a pipe
  whose write end only the runtime holds. When the runtime dies in any way (SIGKILL
  included) it reads EOF, removes containers labelled ``lemonpack.owner=<runtime-id>`` and
  kills every process tagged with the runtime id.
- **Adopted orphans**: as child subreaper the runtime adopts helpers an engine daemonised
  with an emptied environment; every child it forks is registered (:func:`_popen`), so an
  unregistered direct child is adopted and is ended with its engine (:meth:`Engines.adopted_by`
  says what still escapes without cgroups).
- **Ports**: checked free before every launch; a probe answer counts only from the engine
  (:meth:`Engines.owns_port`; for a container: running, and its processes hold the port).
- **Containers**: ``--label lemonpack.owner=<runtime-id>`` is injected right after ``run``;
  before a start, a leftover container of the same name is removed if its owner is dead
  (or is us), otherwise the start fails; :meth:`Engines.cleanup_leftovers` removes every
  labelled container and tagged process whose runtime is dead.

:class:`Runner` binds the pure :class:`~lemonpack.runtime.supervisor.Supervisor` to
:class:`Engines`: thread-safe ``ensure_ready(model)`` / ``unload(model)`` / ``close()``. It is
the one driver of engines (``lemonpack run`` and the server). Failures the runtime cannot
raise (clean-up, callbacks) are logged to ``lemonpack.runtime.engines``.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from lemonpack.errors import LemonpackError, RuntimeFailure
from lemonpack.oci.cmdline import read_container_argv
from lemonpack.runtime import probes
from lemonpack.runtime.logs import LogRing
from lemonpack.runtime.plan import LaunchPlan
from lemonpack.runtime.supervisor import (
    Crashed, Request, Shutdown, StartFailed, Started, State, Stopped, Supervisor, Unload,
)

log = logging.getLogger("lemonpack.runtime.engines")

ENV_RUNTIME = "LEMONPACK_RUNTIME_ID"
ENV_ENGINE = "LEMONPACK_ENGINE_ID"
LABEL_OWNER = "lemonpack.owner"
LABEL_RECIPE = "lemonpack.recipe"
LABEL_ENGINE = "lemonpack.engine"
CONTAINER_CLIS = ("podman", "docker", "nerdctl", "podman-remote")
"""Container CLIs whose labelled leftovers :meth:`Engines.cleanup_leftovers` looks for (when installed)."""

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _prctl = _libc.prctl
except (OSError, AttributeError):  # pragma: no cover (not Linux)
    _prctl = None


# ---------------------------------------------------------------- /proc helpers


@dataclass(frozen=True)
class ProcInfo:
    """One line of the process table: ids and the one-letter state (``Z`` zombie)."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start: int  # start time in clock ticks since boot (tells a reused pid apart)


def proc_info(pid: int) -> ProcInfo | None:
    """``/proc/<pid>/stat`` parsed, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    return ProcInfo(pid, int(rest[1]), int(rest[2]), int(rest[3]), rest[0], int(rest[19]))


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    info = proc_info(pid)
    return info is not None and info.state not in ("Z", "X")


def process_table() -> dict[int, ProcInfo]:
    """Every process visible in ``/proc``."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = proc_info(int(name))
            if info is not None:
                out[info.pid] = info
    return out


def environ_value(pid: int, name: str) -> str | None:
    """The value of ``name`` in the *initial* environment of ``pid`` (None: absent/unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    key = name.encode() + b"="
    for item in data.split(b"\0"):
        if item.startswith(key):
            return item[len(key):].decode("utf-8", "replace")
    return None


def runtime_id_of(pid: int) -> str | None:
    """``<pid>-<start ticks>`` of a live process: an id no later process can reuse."""
    info = proc_info(pid)
    return f"{pid}-{info.start}" if info else None


def owner_alive(runtime_id: str) -> bool:
    """True when the runtime ``runtime_id`` (from :func:`runtime_id_of`) still runs."""
    try:
        pid = int(runtime_id.split("-", 1)[0])
    except ValueError:
        return False
    return runtime_id_of(pid) == runtime_id and pid_alive(pid)


def set_child_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (``PR_SET_CHILD_SUBREAPER``),
    so a grandchild whose parent exits stays in our tree. Returns False when unsupported."""
    if _prctl is None:
        return False
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _pdeathsig_preexec(parent: int) -> Callable[[], None]:
    def preexec() -> None:  # runs in the child between fork and exec: no allocation-heavy work
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: do not outlive it
            os._exit(1)
    return preexec


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pids) -> None:
    """Collect zombies among ``pids`` that are our children (orphans we adopted as subreaper)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


# Every child this module forks is recorded here (under the lock, from fork to registration),
# so that a direct child that is *not* recorded can only be an orphan the kernel re-parented
# to us because we are the child subreaper (see :func:`adopted_orphans`).
_children_lock = threading.Lock()
_own_children: set[int] = set()


def _popen(argv, **kw) -> subprocess.Popen:
    """``subprocess.Popen(argv, **kw)`` recorded as our own child until :func:`_forget`."""
    with _children_lock:
        p = subprocess.Popen(argv, **kw)
        _own_children.add(p.pid)
    return p


def _forget(pid: int) -> None:
    with _children_lock:
        _own_children.discard(pid)


def adopted_orphans(table: Mapping[int, ProcInfo] | None = None) -> dict[int, ProcInfo]:
    """Live direct children of this process that it did not fork through this module:
    orphans re-parented to it as child subreaper (``PR_SET_CHILD_SUBREAPER``), e.g. a
    helper an engine daemonised with ``setsid`` and an emptied environment. Only meaningful
    in a process that set the subreaper flag and forks its children through this module
    (``lemonpack run``, the server); ``table`` is read under the registry lock when not given."""
    me = os.getpid()
    with _children_lock:
        table = process_table() if table is None else table
        own = set(_own_children)
    return {p: i for p, i in table.items() if i.ppid == me and p not in own and i.state not in ("Z", "X")}


def descendants(roots, table: Mapping[int, ProcInfo]) -> set[int]:
    """``roots`` (those present in ``table``) and every process below them by ppid."""
    children: dict[int, list[int]] = {}
    for p, i in table.items():
        children.setdefault(i.ppid, []).append(p)
    out = {r for r in roots if r in table}
    stack = list(out)
    while stack:
        for c in children.get(stack.pop(), ()):
            if c not in out:
                out.add(c)
                stack.append(c)
    return out


def tagged(name: str, value: str, table: Mapping[int, ProcInfo] | None = None) -> set[int]:
    """Live pids whose initial environment has ``name=value``."""
    table = process_table() if table is None else table
    me = os.getpid()
    return {p for p, i in table.items()
            if p != me and i.state not in ("Z", "X") and environ_value(p, name) == value}


def kill_tagged(name: str, value: str, timeout: float = 5.0) -> set[int]:
    """SIGKILL every process tagged ``name=value`` until none is left (or ``timeout``)."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = tagged(name, value)
        if not pids or time.monotonic() > deadline:
            _reap(killed)
            return killed
        for p in pids:
            _kill(p, signal.SIGKILL)
        killed |= pids
        time.sleep(0.01)
        _reap(killed)


def listening_inodes(port: int) -> set[int] | None:
    """Socket inodes of the TCP sockets listening on local ``port`` (IPv4 and IPv6) in
    this network namespace; None when ``/proc/net/tcp*`` cannot be read."""
    out: set[int] = set()
    readable = False
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name, encoding="ascii", errors="replace") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A: LISTEN
                continue
            try:
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    out.add(int(fields[9]))
            except ValueError:
                continue
    return out if readable else None


def check_port_free(host: str, port: int) -> None:
    """Raise :class:`LemonpackError` naming ``host:port`` when a TCP socket cannot be bound
    there (another process listens on it). ``SO_REUSEADDR`` is set, as servers do, so
    connections in TIME_WAIT from an earlier engine do not count; wildcard hosts
    (``0.0.0.0``, ``::``) are checked as such."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    addr = "" if host in ("0.0.0.0", "") else host
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise LemonpackError(f"port {port} on {host} is already in use by another process; "
                                 f"choose another --port (or omit it to use a free one)") from None
        raise LemonpackError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def holds_socket(pids, inodes: set[int]) -> bool:
    """True when one of ``pids`` has an open file descriptor on one of the socket ``inodes``."""
    wanted = {f"socket:[{i}]" for i in inodes}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    return True
            except OSError:
                continue
    return False


# ---------------------------------------------------------------- containers


def inject_labels(argv: tuple[str, ...], labels: Mapping[str, str]) -> tuple[str, ...]:
    """``argv`` of a container ``run``/``create`` (as :func:`lemonpack.oci.cmdline.read_container_argv`
    reads it: any container CLI, global options, ``container run``, wrappers in front) with
    ``--label k=v`` inserted right after the subcommand; unchanged for any other argv.
    Raises :class:`~lemonpack.oci.cmdline.UnreadableCommandLine` for an unreadable argv."""
    inv = read_container_argv(argv)
    return tuple(argv) if inv is None else inv.with_labels(argv, labels)


def reaches_container_cli(argv: tuple[str, ...]) -> bool:
    """True when ``argv`` calls a container CLI (through wrappers too), or may (unreadable)."""
    try:
        return read_container_argv(argv) is not None
    except LemonpackError:
        return True


def _run(argv, *, timeout: float, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=True, text=True)`` through :func:`_popen`;
    raises ``subprocess.TimeoutExpired`` (the child killed) and ``OSError``."""
    p = _popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
               env=None if env is None else dict(env))
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise
    finally:
        if p.returncode is not None:
            _forget(p.pid)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def _ctl(runtime: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return _run([runtime, *args], timeout=timeout)


def _ctl_failed(r: subprocess.CompletedProcess, what: str) -> None:
    """Log a failed container CLI call (its first error line), never silently drop it."""
    msg = (r.stderr or r.stdout or "").strip().splitlines()
    log.warning("%s failed (exit %s): %s", what, r.returncode, msg[-1] if msg else "no output")


def _gone_error(r: subprocess.CompletedProcess) -> bool:
    """True when a failed ``rm``/``inspect`` only says the container does not exist."""
    text = (r.stderr or "").lower()
    return "no such container" in text or "no container with name or id" in text or "does not exist" in text


def container_labels(runtime: str, name: str) -> dict[str, str] | None:
    """The labels of the container named exactly ``name`` (None: there is none)."""
    r = _ctl(runtime, "ps", "-a", "--filter", f"name=^{name}$",
             "--format", "{{.ID}}\t{{.Names}}\t{{json .Labels}}")
    for line in r.stdout.splitlines():
        cid, names, labels = (line.split("\t", 2) + ["", ""])[:3]
        if name in names.split(","):
            try:
                return json.loads(labels) or {}
            except ValueError:
                return {}
    return None


def container_by_label(runtime: str, key: str, value: str) -> str | None:
    """The id of a container labelled ``key=value`` (None: there is none)."""
    r = _ctl(runtime, "ps", "-a", "-q", "--filter", f"label={key}={value}", timeout=30.0)
    if r.returncode != 0:
        _ctl_failed(r, f"`{runtime} ps --filter label={key}={value}`")
    ids = r.stdout.split()
    return ids[0] if ids else None


def container_exists(runtime: str, name: str) -> bool:
    """True while a container named exactly ``name`` exists (in any state)."""
    r = _ctl(runtime, "ps", "-a", "-q", "--filter", f"name=^{name}$")
    return bool(r.stdout.strip())


def container_state(runtime: str, name: str) -> dict | None:
    """``State`` of ``<runtime> inspect --type container NAME`` (podman, docker and nerdctl
    report ``Running`` and ``Pid``; podman also ``ConmonPid``); None when there is no such
    container. Raises ``OSError``/``subprocess.TimeoutExpired`` when the CLI cannot be run."""
    r = _ctl(runtime, "inspect", "--type", "container", "--format", "{{json .State}}", name, timeout=30.0)
    if r.returncode != 0:
        if not _gone_error(r):
            _ctl_failed(r, f"`{runtime} inspect {name}`")
        return None
    try:
        state = json.loads(r.stdout.strip().splitlines()[0])
    except (ValueError, IndexError):
        return None
    return state if isinstance(state, dict) else None


def wait_container_gone(runtime: str, name: str, timeout: float = 30.0, poll: float = 0.05) -> bool:
    """Poll until no container is named ``name``; True when it is gone within ``timeout``."""
    deadline = time.monotonic() + timeout
    while container_exists(runtime, name):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


def remove_container(runtime: str, name: str, timeout: float = 30.0) -> None:
    """``rm -f -t 0`` the container ``name`` and wait until it is gone; RuntimeFailure if not."""
    r = _ctl(runtime, "rm", "-f", "-t", "0", name, timeout=timeout)
    if r.returncode != 0 and not _gone_error(r):
        _ctl_failed(r, f"`{runtime} rm -f -t 0 {name}`")
    if not wait_container_gone(runtime, name, timeout):
        raise RuntimeFailure(f"container {name} is still there after `{runtime} rm -f`")


def remove_orphan_containers(runtime: str, *, only_owner: str | None = None) -> list[str]:
    """Remove containers labelled ``lemonpack.owner`` whose owner is dead (or, with
    ``only_owner``, exactly that owner's); returns their names."""
    r = _ctl(runtime, "ps", "-a", "--filter", f"label={LABEL_OWNER}", "--format", "{{.Names}}\t{{json .Labels}}")
    if r.returncode != 0:
        if "cannot connect" in (r.stderr or "").lower():  # a docker CLI without its daemon: nothing to find
            log.info("%s cannot reach its daemon; no leftover containers to look for", runtime)
        else:
            _ctl_failed(r, f"`{runtime} ps` looking for leftover containers")
        return []
    removed = []
    for line in r.stdout.splitlines():
        name, _, labels = line.partition("\t")
        try:
            owner = (json.loads(labels) or {}).get(LABEL_OWNER, "")
        except ValueError:
            continue
        if not owner:
            continue
        if (only_owner is not None and owner == only_owner) or (only_owner is None and not owner_alive(owner)):
            rm = _ctl(runtime, "rm", "-f", "-t", "0", name)
            if rm.returncode != 0 and not _gone_error(rm):
                _ctl_failed(rm, f"`{runtime} rm -f -t 0 {name}` (a leftover of runtime {owner})")
                continue
            log.info("removed leftover container %s of runtime %s", name, owner)
            removed.append(name)
    return removed


# ---------------------------------------------------------------- one engine


class EngineProcess:
    """One spawned engine: the Popen, its logs, its exit, its tag.

    ``pid`` is the direct child's pid (the session and process-group id as well).
    ``on_exit(fn)`` registers ``fn(returncode)``, called once from a waiter thread.
    """

    def __init__(self, plan: LaunchPlan, popen: subprocess.Popen, tag: str, logs: LogRing) -> None:
        self.plan, self.popen, self.tag, self.logs = plan, popen, tag, logs
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
        return tuple(self.popen.args)

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
        _forget(self.pid)
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
        self._runtimes_used: set[str] = set()
        self.subreaper = set_child_subreaper() if subreaper else False
        self._sentinel: subprocess.Popen | None = _start_sentinel(self.runtime_id) if sentinel else None

    # -- start

    def spawn(self, plan: LaunchPlan) -> EngineProcess:
        """Start ``plan``'s process (not probed). Raises RuntimeFailure when the executable
        cannot be run, a foreign container holds ``plan.container_name``, or ``plan.port``
        is not free (checked before every launch, process or container, so that a health
        probe is never answered by a server that was there first)."""
        argv = tuple(plan.argv)
        tag = f"{self.runtime_id}/{next(self._counter)}"
        if plan.container_runtime or plan.container_name:
            rt = plan.container_runtime or argv[0]
            self._note_runtime(rt)
            if plan.container_name:  # a leftover of ours (or of a dead runtime) may hold the port too
                self._clear_container_name(rt, plan.container_name)
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
            return _popen(list(argv), env=env, cwd=plan.working_dir or None, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                          close_fds=True, preexec_fn=_pdeathsig_preexec(parent))
        try:
            p = self._spawner.submit(popen).result()
        except OSError as e:
            raise RuntimeFailure(f"{plan.recipe}: cannot run {argv[0]!r}: {e.strerror or e}") from e
        eng = EngineProcess(plan, p, tag, logs)
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
        rt = plan.container_runtime or plan.argv[0]
        try:
            ref = plan.container_name or container_by_label(rt, LABEL_ENGINE, eng.tag)
            state = container_state(rt, ref) if ref else None
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
            with _children_lock:  # a child forked by us is registered before the table is read
                table = process_table()
                own = set(_own_children)
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
        is gone (``rm -f -t 0`` when the stop command did not remove it), give its CLI client
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
                r = _run(stop_argv, timeout=self.stop_timeout, env={**os.environ, **plan.env})
                for line in (r.stdout + r.stderr).splitlines():
                    eng.logs.append(f"[stop] {line}")
                if r.returncode != 0 and not (plan.container_name and _gone_error(r)):
                    log.warning("%s: stop command %s exited with code %s", plan.recipe, list(stop_argv), r.returncode)
            except (OSError, subprocess.TimeoutExpired) as e:
                eng.logs.append(f"[stop] stop command failed: {e}")
                log.warning("%s: stop command %s failed: %s", plan.recipe, list(stop_argv), e)
        first = signal.SIGTERM
        if plan.container_name:
            rt = plan.container_runtime or plan.argv[0]
            if not wait_container_gone(rt, plan.container_name, timeout=min(2.0, self.container_timeout)):
                remove_container(rt, plan.container_name, self.container_timeout)
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
        for p in pids:
            _kill(p, first)
        if self._group_alive(eng, pids):  # atomic for members forking right now
            _killpg(eng.pid, first)
        deadline = time.monotonic() + grace
        seen = set(pids)
        while pids and time.monotonic() < deadline:
            time.sleep(0.005)
            pids = self.members(eng)
            seen |= pids
        deadline = time.monotonic() + 10.0
        while pids:
            for p in pids:
                _kill(p, signal.SIGKILL)
            if self._group_alive(eng, pids):
                _killpg(eng.pid, signal.SIGKILL)
            time.sleep(0.005)
            _reap(seen - {eng.pid})
            pids = self.members(eng)
            seen |= pids
            if time.monotonic() > deadline:
                raise RuntimeFailure(f"{eng.plan.recipe}: processes {sorted(pids)} survive SIGKILL")
        eng.exited.wait(5.0)
        _reap(seen - {eng.pid})

    # -- housekeeping

    def cleanup_leftovers(self, container_runtimes: tuple[str, ...] = CONTAINER_CLIS) -> dict[str, list]:
        """Remove what crashed runtimes left, whatever this runtime launches next (a process
        recipe too): containers labelled ``lemonpack.owner`` by a dead runtime, for each of
        ``container_runtimes`` that is installed, and processes tagged by a dead runtime.
        Called at every start of ``lemonpack run`` (and the server). Failures of the container
        CLIs are logged (``lemonpack.runtime.engines``), never raised: a clean-up must not
        prevent a launch. Returns ``{"containers": [...], "processes": [...]}``."""
        gone_containers: list[str] = []
        for rt in container_runtimes:
            if shutil.which(rt):
                try:
                    gone_containers += remove_orphan_containers(rt)
                except (OSError, subprocess.TimeoutExpired) as e:
                    log.warning("cannot look for leftover containers with %s: %s", rt, e)
        owners: dict[int, str] = {}
        for p in process_table():
            rid = environ_value(p, ENV_RUNTIME)
            if rid and rid != self.runtime_id and not owner_alive(rid):
                owners[p] = rid
        for p in owners:
            _kill(p, signal.SIGKILL)
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
            _kill(p, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            time.sleep(0.005)
            _reap(seen)
            pids = tree()
            seen |= pids
        deadline = time.monotonic() + 10.0
        while pids and time.monotonic() < deadline:
            for p in pids:
                _kill(p, signal.SIGKILL)
            time.sleep(0.005)
            _reap(seen)
            pids = tree()
            seen |= pids
        if pids:
            log.warning("adopted processes %s survive SIGKILL", sorted(pids))

    def _note_runtime(self, rt: str) -> None:
        if rt not in self._runtimes_used:
            self._runtimes_used.add(rt)
            if self._sentinel is not None and self._sentinel.stdin:
                try:
                    self._sentinel.stdin.write(f"runtime {rt}\n".encode())
                    self._sentinel.stdin.flush()
                except OSError:
                    pass

    def _clear_container_name(self, rt: str, name: str) -> None:
        labels = container_labels(rt, name)
        if labels is None:
            return
        owner = labels.get(LABEL_OWNER)
        if owner and (owner == self.runtime_id or not owner_alive(owner)):
            remove_container(rt, name, self.container_timeout)
            return
        if wait_container_gone(rt, name, timeout=self.container_timeout):  # e.g. a --rm still finishing
            return
        raise RuntimeFailure(f"a container named {name} already exists and is not ours "
                             f"(owner {owner or 'unknown'}); remove it with `{rt} rm -f {name}`")


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- the sentinel


def _start_sentinel(runtime_id: str) -> subprocess.Popen:
    """Start the reaper sentinel: its own session, no tag, stdin a pipe only we hold."""
    env = {k: v for k, v in os.environ.items() if k not in (ENV_RUNTIME, ENV_ENGINE)}
    return _popen([sys.executable, "-m", "lemonpack.runtime.engines", "reap", runtime_id],
                  stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True, env=env,
                  close_fds=True)  # stderr inherited: what it fails to clean up is said there


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


# ---------------------------------------------------------------- supervisor binding


@dataclass
class _Live:
    generation: int
    engine: EngineProcess | None = None
    watchdog: probes.Watchdog | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Runner:
    """The supervisor bound to real engines: a thread-safe front for many models.

    ``plans`` maps a model name to its :class:`LaunchPlan` (a mapping or a callable, called
    at each start). :meth:`ensure_ready` blocks until the model's engine is ready (starting
    it, or joining a start under way) and returns it. ``on_state(model, old, new)`` observes
    transitions; ``on_spawn(model, engine)`` is called as soon as an engine is spawned,
    before its probe (``lemonpack run`` streams its log lines from there). Decisions are the
    :class:`Supervisor`'s; this class only performs them. It is the one driver of engines:
    ``lemonpack run`` (one model) and the server (many) both use it.
    """

    def __init__(self, plans: Mapping[str, LaunchPlan] | Callable[[str], LaunchPlan],
                 engines: Engines | None = None, *, watchdog_interval: float | None = None,
                 watchdog_failures: int = 3, on_state: Callable[[str, State, State], None] | None = None,
                 on_spawn: Callable[[str, EngineProcess], None] | None = None) -> None:
        self._plans = plans
        self._on_spawn = on_spawn
        self.engines = engines or Engines()
        self._own_engines = engines is None
        self.watchdog_interval, self.watchdog_failures = watchdog_interval, watchdog_failures
        self._on_state = on_state
        self._lock = threading.RLock()
        self._sv = Supervisor(self)
        self._live: dict[str, _Live] = {}
        self._idle = threading.Condition(self._lock)
        self.starts = 0  # engines spawned (for tests and stats)

    # -- public API

    def ensure_ready(self, model: str, timeout: float | None = None) -> EngineProcess:
        """Block until ``model`` is ready; return its engine. Raises RuntimeFailure when the
        start fails, the model is unloaded meanwhile, or ``timeout`` seconds pass."""
        fut = self.request(model)
        try:
            return fut.result(timeout)
        except TimeoutError as e:
            raise RuntimeFailure(f"{model}: not ready within {timeout}s") from e

    def request(self, model: str) -> Future:
        """Ask for ``model`` without blocking: a future resolved with its ready engine, or
        failed with RuntimeFailure (start failed, unloaded, shutting down)."""
        fut: Future = Future()
        self._post(Request(model, fut))
        return fut

    def last_error(self, model: str) -> str | None:
        """Why ``model``'s last engine failed or crashed (None: it did not)."""
        with self._lock:
            return self._sv.slot(model).last_error

    def unload(self, model: str, timeout: float | None = 60.0) -> None:
        """Stop ``model``'s engine and wait until it is stopped."""
        self._post(Unload(model))
        self._wait(lambda: self._sv.state(model) is State.STOPPED, timeout)

    def state(self, model: str) -> State:
        with self._lock:
            return self._sv.state(model)

    def engine(self, model: str) -> EngineProcess | None:
        """The current engine of ``model`` (None when there is none)."""
        with self._lock:
            live = self._live.get(model)
            return live.engine if live else None

    def wait_state(self, model: str, state: State, timeout: float | None = 30.0) -> bool:
        """Block until ``model`` is in ``state``; False on timeout."""
        return self._wait(lambda: self._sv.state(model) is state, timeout)

    def close(self, timeout: float | None = 120.0) -> None:
        """Stop every model and wait; then close the engines driver if we made it."""
        self._post(Shutdown())
        self._wait(lambda: self._sv.idle, timeout)
        if self._own_engines:
            self.engines.close()

    # -- plumbing

    def _post(self, event) -> None:
        with self._lock:
            self._sv.handle(event)
            self._idle.notify_all()

    def _wait(self, pred: Callable[[], bool], timeout: float | None) -> bool:
        with self._idle:
            return self._idle.wait_for(pred, timeout)

    def _plan(self, model: str) -> LaunchPlan:
        return self._plans(model) if callable(self._plans) else self._plans[model]

    # -- Effects (called under the lock; must not block)

    def start(self, model: str, generation: int) -> None:
        live = self._live[model] = _Live(generation)
        threading.Thread(target=self._do_start, args=(model, live), name=f"start-{model}", daemon=True).start()

    def stop(self, model: str, generation: int) -> None:
        live = self._live.get(model)
        if live is None or live.generation != generation:
            live = _Live(generation)
        live.cancelled.set()
        threading.Thread(target=self._do_stop, args=(model, live), name=f"stop-{model}", daemon=True).start()

    def ready(self, model, generation, waiters) -> None:
        eng = self._live[model].engine
        for w in waiters:
            w.set_result(eng)

    def failed(self, model, waiters, error) -> None:
        for w in waiters:
            w.set_exception(error)

    def state_changed(self, model, old, new) -> None:
        if self._on_state is not None:
            try:  # an observer must not break the machine in the middle of a transition
                self._on_state(model, old, new)
            except Exception:  # noqa: BLE001
                log.exception("%s: state observer failed on %s -> %s", model, old.value, new.value)

    # -- workers

    def _do_start(self, model: str, live: _Live) -> None:
        try:
            plan = self._plan(model)
            with live.lock:
                if live.cancelled.is_set():
                    raise RuntimeFailure(f"{model}: start cancelled")
                live.engine = eng = self.engines.spawn(plan)
                self.starts += 1
            if self._on_spawn is not None:
                try:
                    self._on_spawn(model, eng)
                except Exception:  # noqa: BLE001
                    log.exception("%s: on_spawn observer failed", model)
            self.engines.wait_ready(eng, cancelled=live.cancelled)
        except Exception as e:  # noqa: BLE001 (every failure is reported as an event)
            err = e if isinstance(e, RuntimeFailure) else RuntimeFailure(f"{model}: {e}")
            self._post(StartFailed(model, live.generation, err))
            return
        gen = live.generation
        if live.cancelled.is_set():  # unloaded while the probe ran: the stop worker cleans up
            self._post(StartFailed(model, gen, RuntimeFailure(f"{model}: start cancelled")))
            return
        eng.on_exit(lambda rc: self._post(Crashed(model, gen, f"engine exited with code {rc}")))
        if plan.health_probe.type == "http":
            live.watchdog = probes.Watchdog(plan.health_probe, plan.host, plan.port,
                                            lambda why: self._post(Crashed(model, gen, why)),
                                            interval=self.watchdog_interval, failures=self.watchdog_failures,
                                            name=model).start()
        self._post(Started(model, gen))

    def _do_stop(self, model: str, live: _Live) -> None:
        try:
            with live.lock:
                eng = live.engine
            if live.watchdog is not None:
                live.watchdog.stop()
            if eng is not None:
                self.engines.stop(eng)
        finally:
            self._post(Stopped(model, live.generation))


__all__ = [
    "CONTAINER_CLIS", "LABEL_ENGINE", "adopted_orphans", "container_by_label", "container_state", "descendants",
    "ENV_ENGINE", "ENV_RUNTIME", "EngineProcess", "Engines", "LABEL_OWNER", "LABEL_RECIPE", "ProcInfo", "Runner",
    "check_port_free",
    "container_exists", "holds_socket", "inject_labels", "kill_tagged", "listening_inodes", "owner_alive", "pid_alive", "proc_info",
    "process_table", "reaper_main", "remove_container", "remove_orphan_containers", "runtime_id_of",
    "set_child_subreaper", "tagged", "wait_container_gone",
]

if __name__ == "__main__":  # the sentinel: python -m lemonpack.runtime.engines reap <runtime-id>
    if len(sys.argv) == 3 and sys.argv[1] == "reap":
        sys.exit(reaper_main(sys.argv[2]))
    sys.exit("usage: python -m lemonpack.runtime.engines reap RUNTIME_ID")
