"""The process table and signalling: what the runtime reads in ``/proc`` and how it ends processes.

Linux only (``/proc``, ``prctl``). Design notes: ``lemonpack/runtime/lifecycle/SUPERVISOR.md``.

- **Reading** ``/proc/<pid>/stat`` (:func:`proc_info`, :func:`process_table`; proc(5),
  field 22 ``starttime`` tells a reused pid apart) and ``/proc/<pid>/environ`` (the *initial*
  environment, :func:`environ_value`).
- **Tags**: every engine's environment carries :data:`ENV_RUNTIME` (``<pid>-<start ticks>``
  of the runtime, :func:`runtime_id_of`) and :data:`ENV_ENGINE` (``<runtime-id>/<n>``);
  descendants inherit them through fork and exec, even after ``setsid``
  (:func:`tagged`, :func:`kill_tagged`).
- **Signalling**: :func:`signal_pid` / :func:`signal_group` ignore processes that are gone;
  :func:`reap` collects zombies that are ours.
- **Parent-death signal and subreaper** (prctl(2)): :func:`pdeathsig_preexec` makes a child
  die with the *thread* that forked it; :func:`set_child_subreaper` re-parents orphaned
  descendants to this process.
- **Adopted orphans**: every child the runtime forks goes through :func:`popen_child` (its
  pid registered under a lock held from fork to registration, dropped by
  :func:`forget_child`), so a live direct child that is *not* registered can only be an
  orphan the kernel re-parented to us as subreaper (:func:`adopted_orphans`).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

ENV_RUNTIME = "LEMONPACK_RUNTIME_ID"
ENV_ENGINE = "LEMONPACK_ENGINE_ID"


_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_prctl: Callable[..., int] | None
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _prctl = _libc.prctl
except (OSError, AttributeError):  # pragma: no cover (not Linux)
    _prctl = None


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


#: The soft open-files limit this process started with, when :func:`raise_nofile` raised it
#: (engines get it back: a program written for the usual 1024, ``select()`` and all, sees it).
_NOFILE_START: int | None = None


def raise_nofile() -> tuple[int, int]:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit (capped at
    ``/proc/sys/fs/nr_open`` when the hard limit is unlimited), as a server holding a
    descriptor per connection should (systemd.exec(5), ``LimitNOFILE=``: "raise the soft
    limit to the hard limit" in the program itself, and hand children the old soft limit);
    engines spawned after it start with the soft limit this process had
    (:func:`pdeathsig_preexec`). Returns ``(old soft, new soft)``; an error leaves it as it was."""
    global _NOFILE_START
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(open("/proc/sys/fs/nr_open").read())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError):
            return soft, soft
        if _NOFILE_START is None:
            _NOFILE_START = soft
        return soft, target
    return soft, soft


def pdeathsig_preexec(parent: int) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` in the
    child, then exit at once if ``parent`` (the pid that forks) already died before the prctl
    (the race between fork and prctl). The kernel fires the signal when the forking *thread*
    exits (prctl(2)), so fork from a long-lived thread. When :func:`raise_nofile` raised the
    open-files limit, the child gets the soft limit this process started with back."""
    nofile = _NOFILE_START

    def preexec() -> None:  # runs in the child between fork and exec: no allocation-heavy work
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        if os.getppid() != parent:  # the parent died before prctl: do not outlive it
            os._exit(1)
    return preexec


def signal_pid(pid: int, sig: int) -> None:
    """``os.kill(pid, sig)``; a process that is gone (or not ours to signal) is ignored."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_group(pgid: int, sig: int) -> None:
    """``os.killpg(pgid, sig)``; a group that is gone (or not ours to signal) is ignored."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def reap(pids) -> None:
    """Collect zombies among ``pids`` that are our children (orphans we adopted as subreaper)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


# Every child the runtime forks is recorded here (under the lock, from fork to registration),
# so that a direct child that is *not* recorded can only be an orphan the kernel re-parented
# to us because we are the child subreaper (see :func:`adopted_orphans`).
_children_lock = threading.Lock()
_own_children: set[int] = set()


def popen_child(argv, **kw) -> subprocess.Popen:
    """``subprocess.Popen(argv, **kw)`` recorded as our own child until :func:`forget_child`."""
    with _children_lock:
        p = subprocess.Popen(argv, **kw)
        _own_children.add(p.pid)
    return p


def forget_child(pid: int) -> None:
    """Drop ``pid`` from the registry of our children (once it has been waited for)."""
    with _children_lock:
        _own_children.discard(pid)


def run_child(argv, *, timeout: float, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=True, text=True)`` through :func:`popen_child`;
    raises ``subprocess.TimeoutExpired`` (the child killed) and ``OSError``."""
    p = popen_child(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                    env=None if env is None else dict(env))
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise
    finally:
        if p.returncode is not None:
            forget_child(p.pid)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def table_and_own_children() -> tuple[dict[int, ProcInfo], set[int]]:
    """``(process_table(), pids of the children we forked)`` read together under the registry
    lock, so a child forked through :func:`popen_child` meanwhile is never taken for an orphan."""
    with _children_lock:
        return process_table(), set(_own_children)


def adopted_orphans(table: Mapping[int, ProcInfo] | None = None) -> dict[int, ProcInfo]:
    """Live direct children of this process that it did not fork through :func:`popen_child`:
    orphans re-parented to it as child subreaper (``PR_SET_CHILD_SUBREAPER``), e.g. a
    helper an engine daemonised with ``setsid`` and an emptied environment. Only meaningful
    in a process that set the subreaper flag and forks its children through :func:`popen_child`
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
            reap(killed)
            return killed
        for p in pids:
            signal_pid(p, signal.SIGKILL)
        killed |= pids
        time.sleep(0.01)
        reap(killed)


__all__ = ["raise_nofile", 
    "ENV_ENGINE", "ENV_RUNTIME", "ProcInfo", "adopted_orphans", "descendants", "environ_value", "forget_child",
    "kill_tagged", "owner_alive", "pdeathsig_preexec", "pid_alive", "popen_child", "proc_info", "process_table",
    "reap", "run_child", "runtime_id_of", "set_child_subreaper", "signal_group", "signal_pid", "table_and_own_children",
    "tagged",
]
