"""StopSignals: a signal handler that cannot deadlock the thread it interrupts.

The bug it replaces: ``lemonpack run`` set a ``threading.Event`` from its SIGINT handler while
its main thread polled ``event.wait(0.1)``; when the signal landed while the main thread held
the event's lock, ``set()`` blocked forever and Ctrl-C hung the run (CI, about 1 run in 40 of a
tight loop)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest
from support.interrupt import popen_interruptible

from lemonpack.runtime.lifecycle.stop_signals import StopSignals

TIGHT_LOOP = """
import sys
from lemonpack.runtime.lifecycle.stop_signals import StopSignals
with StopSignals() as stop:
    print("go", flush=True)
    while not stop.wait(0.0001):
        pass
sys.exit(128 + stop.got[0])
"""


@pytest.mark.slow
def test_a_signal_during_a_tight_wait_loop_always_stops_it():
    """40 processes in the loop that hung with threading.Event each stop within 5 s."""
    for _ in range(40):
        p = popen_interruptible([sys.executable, "-c", TIGHT_LOOP], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline() == "go\n"
        time.sleep(0.02)
        p.send_signal(signal.SIGINT)
        try:
            assert p.wait(5) == 130
        finally:
            p.kill()
            p.wait()


def test_wait_returns_when_a_signal_comes_and_handlers_are_restored():
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        assert signal.getsignal(signal.SIGTERM) != before
        assert not stop.is_set() and stop.wait(0.01) is False
        woke: list[bool] = []
        waiter = threading.Thread(target=lambda: woke.append(stop.wait()))  # wait(None) from another thread
        waiter.start()
        time.sleep(0.05)  # most often the waiter is blocked by now; if not, wait() sees the event set
        signal.raise_signal(signal.SIGTERM)
        waiter.join(5)
        assert woke == [True] and stop.got == [signal.SIGTERM]
        assert stop.wait(0) is True and stop.is_set()  # stays set (wait(0) does not block)
    assert signal.getsignal(signal.SIGTERM) == before


def test_set_without_a_signal_and_many_signals_never_block():
    with StopSignals((signal.SIGUSR1,)) as stop:
        for _ in range(100_000 // 1000):  # more bytes than a pipe holds are dropped, never blocking
            for _ in range(1000):
                stop._handle(signal.SIGUSR1, None)
        stop.set()
        assert stop.is_set() and stop.got[-1] == signal.SIGTERM
