"""TCP ports of engines (RFC section 9): a free port for an engine, the check that a chosen one is
free before a launch, and the ``/proc`` reads that tell whether a listening socket belongs to an
engine's processes (so a probe answer counts only when it comes from the engine). Linux
``/proc/net/tcp*`` and ``/proc/PID/fd``; no root needed for our own processes.
"""

from __future__ import annotations

import errno
import os
import socket

from lemonpack.errors import InputError


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


def free_port(host: str, avoid: frozenset[int] = frozenset()) -> int:
    """A TCP port free on ``host`` a moment ago, never one of ``avoid`` (a server's listen port:
    an engine port equal to it is impossible by construction). OSError when ``host`` cannot
    be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    while True:
        with socket.socket(family) as s:
            s.bind((host if host not in ("0.0.0.0", "::") else "", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port


def check_port_free(host: str, port: int) -> None:
    """Raise :class:`~lemonpack.errors.InputError` naming ``host:port`` when a TCP socket cannot be bound
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
            raise InputError(f"port {port} on {host} is already in use by another process; "
                             f"choose another --port (or omit it to use a free one)") from None
        raise InputError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


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


__all__ = ["check_port_free", "free_port", "holds_socket", "listening_inodes"]
