"""Kept for importers: :class:`StopSignals` lives in :mod:`lemonpack.runtime.stop_signals`
(the runtime's foreground loop, :func:`lemonpack.runtime.foreground.run_foreground`, waits
on it; the CLI only installs it)."""

from lemonpack.runtime.stop_signals import StopSignals

__all__ = ["StopSignals"]
