"""Children that a test interrupts (Ctrl-C: SIGINT) start with SIGINT at its default disposition.

A process started from a script with ``nohup … &`` (and some CI runners) inherits SIGINT as
*ignored* (POSIX: a background job must not see the terminal's Ctrl-C). Its children inherit
that across ``fork`` and ``exec``, and Python keeps an ignored SIGINT ignored (it installs its
``KeyboardInterrupt`` handler only when SIGINT is at its default at start-up). A test's
``send_signal(SIGINT)`` then reaches a child that never sees it, and the test fails or hangs in
such a run although it passes in a terminal. So every test that interrupts a child starts it
through :func:`interruptible`, which sets the child's SIGINT to the default itself: whatever
the test runner inherited, the child behaves as under a terminal.

The disposition is set in a small wrapper that then ``exec``s the real command (same pid, so
``proc.pid`` and ``send_signal`` reach the command itself), not with ``preexec_fn``, which the
``subprocess`` documentation calls unsafe in a process with threads (the tests have reader and
server threads). Standard library only: the serve cases' harness, run outside pytest, uses it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from typing import Any

#: Python run as ``python -c RESET_SIGINT ARGV...``: SIGINT to the default, then exec ARGV.
RESET_SIGINT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                "os.execvp(sys.argv[1], sys.argv[1:])")


def interruptible(argv: Sequence[str]) -> list[str]:
    """``argv`` (a program and its arguments, the program found on ``PATH`` as ``execvp`` does)
    prefixed so that it runs with SIGINT at its default disposition."""
    if not argv:
        raise ValueError("interruptible() needs a program to run")
    return [sys.executable, "-c", RESET_SIGINT, *argv]


def popen_interruptible(argv: Sequence[str], **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen(interruptible(argv), **popen)``: a child a test may stop with SIGINT."""
    return subprocess.Popen(interruptible(argv), **popen)
