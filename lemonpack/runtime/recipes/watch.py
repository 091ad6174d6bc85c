"""Discovery kept current: :class:`DiscoveryWatcher` re-scans a
:class:`~lemonpack.runtime.recipes.discovery.Discovery` in a daemon thread every 2 s (RFC section 8:
"re-scans every 2 seconds") and tells its owner when the result changed (``lemonpack serve``'s
catalogue). The scan itself, its cache and its rules are :mod:`lemonpack.runtime.recipes.discovery`'s;
failures are logged on that module's logger, ``lemonpack.runtime.recipes.discovery``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from lemonpack.runtime.recipes.discovery import CannotLook, Discovery, DiscoveryResult

log = logging.getLogger("lemonpack.runtime.recipes.discovery")

#: Default watcher period in seconds (RFC section 8: "re-scans every 2 seconds").
WATCH_INTERVAL_SECONDS = 2.0
#: Seconds between two log lines about re-scans that could not look (out of descriptors).
CANNOT_LOOK_EVERY = 30.0


class DiscoveryWatcher:
    """Re-scan a :class:`Discovery` every ``interval`` seconds in a daemon thread.

    :meth:`current` returns the latest :class:`DiscoveryResult` (a scan runs in the
    constructor, so it is never empty by accident); ``on_change(result)`` is called from
    the watcher thread whenever a scan's result differs from the previous one. A failing
    scan or callback is logged and the watcher keeps going. Use as a context manager, or
    call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, discovery: Discovery | None = None, *, interval: float = WATCH_INTERVAL_SECONDS,
                 on_change: Callable[[DiscoveryResult], None] | None = None):
        self.discovery = discovery if discovery is not None else Discovery()
        self.interval = interval
        self.on_change = on_change
        self._current = self.discovery.scan()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._generation = 0
        self._cond = threading.Condition()

    def current(self) -> DiscoveryResult:
        """The latest scan result."""
        with self._cond:
            return self._current

    @property
    def generation(self) -> int:
        """How many times the result has changed since construction."""
        with self._cond:
            return self._generation

    def refresh(self) -> DiscoveryResult:
        """Scan now (in the caller's thread), publish and return the result. Raises
        :class:`~lemonpack.runtime.recipes.discovery.CannotLook` (out of file descriptors;
        the last result stays published)."""
        result = self.discovery.scan()
        changed = False
        with self._cond:
            if result != self._current:
                self._current = result
                self._generation += 1
                changed = True
                self._cond.notify_all()
        if changed and self.on_change is not None:
            try:
                self.on_change(result)
            except Exception:  # noqa: BLE001 - a callback bug must not kill the watcher
                log.exception("discovery on_change callback failed")
        return result

    def wait_for_change(self, generation: int, timeout: float) -> bool:
        """Block until :attr:`generation` exceeds ``generation`` or ``timeout`` seconds
        pass; True when it changed."""
        with self._cond:
            return self._cond.wait_for(lambda: self._generation > generation, timeout)

    def _run(self) -> None:
        told = -CANNOT_LOOK_EVERY
        while not self._stop.wait(self.interval):
            try:
                self.refresh()
            except CannotLook as e:  # "cannot look now", never "gone": the last result stands
                if time.monotonic() - told >= CANNOT_LOOK_EVERY:
                    told = time.monotonic()
                    log.warning("discovery re-scan skipped, keeping the last result: %s", e)
            except Exception:  # noqa: BLE001 - keep watching whatever a scan hits
                log.exception("discovery re-scan failed")

    def start(self) -> DiscoveryWatcher:
        """Start the watcher thread (idempotent); returns self."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="lemonpack-discovery-watcher", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop the thread and wait up to ``timeout`` seconds for it to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        """True while the watcher thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> DiscoveryWatcher:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["DiscoveryWatcher", "WATCH_INTERVAL_SECONDS"]
