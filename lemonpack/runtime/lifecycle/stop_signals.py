"""SIGINT / SIGTERM as a stop request that a signal handler can raise without a lock.

``threading.Event.set()`` must not be called from a signal handler: Python runs the handler
in the main thread between two bytecodes, possibly while that same thread holds the
event's internal (non-reentrant) lock inside ``Event.wait``; ``set()`` then blocks on it
forever and ``lemonpack run`` hangs after Ctrl-C (seen in CI, about 1 in 40 with a tight
wait loop). :class:`StopSignals` records the signal and writes one byte to a non-blocking
pipe (``os.write`` takes no Python lock); waiters ``select`` on the pipe.
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any


class StopSignals:
    """``with StopSignals() as stop:`` installs handlers for ``signals`` (default SIGINT and
    SIGTERM, main thread only) and restores the previous ones on exit.

    ``stop.got`` lists the signal numbers received, in order; ``stop.is_set()`` is True once
    one came; ``stop.wait(timeout)`` blocks up to ``timeout`` seconds (None: forever) until
    one came and returns ``is_set()``. ``wait`` may be called from any thread."""

    def __init__(self, signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)):
        self.signals = signals
        self.got: list[int] = []
        self._old: dict[int, Callable[[int, FrameType | None], Any] | int | signal.Handlers | None] = {}
        self._r = self._w = -1

    def __enter__(self) -> StopSignals:
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        self._old = {s: signal.signal(s, self._handle) for s in self.signals}
        return self

    def __exit__(self, *_exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}
        r, w, self._r, self._w = self._r, self._w, -1, -1
        os.close(w)
        os.close(r)

    def _handle(self, signum: int, _frame) -> None:
        self.got.append(signum)
        try:
            os.write(self._w, b"\0")
        except (BlockingIOError, OSError):  # the pipe is full (a waiter wakes anyway) or closed
            pass

    def set(self, signum: int = signal.SIGTERM) -> None:
        """Request a stop as if ``signum`` had come (for callers other than a signal)."""
        self._handle(signum, None)

    def is_set(self) -> bool:
        """True once a stop was requested."""
        return bool(self.got)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a stop is requested or ``timeout`` seconds passed; returns :meth:`is_set`."""
        if not self.got and self._r >= 0:
            try:
                select.select([self._r], [], [], timeout)
            except (OSError, ValueError):  # closed under us by __exit__
                pass
        return self.is_set()


__all__ = ["StopSignals"]
