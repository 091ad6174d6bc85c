"""Per-engine logs: a bounded ring buffer of output lines, fed by a reader thread.

An engine's stdout and stderr share one pipe (``stderr=STDOUT``), so lines keep their
order. :class:`LogRing` keeps at most ``max_lines`` lines and ``max_bytes`` bytes (the
oldest go first); a line longer than ``max_line_bytes`` is cut. Subscribers (the
foreground ``lemonpack run``) get every line as it arrives, from the reader thread.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import IO

Subscriber = Callable[[str], None]
log = logging.getLogger("lemonpack.runtime.engines.logs")


class LogRing:
    """A thread-safe bounded buffer of decoded lines (without their newline)."""

    def __init__(self, max_lines: int = 2000, max_bytes: int = 1 << 20, max_line_bytes: int = 8192) -> None:
        self.max_lines, self.max_bytes, self.max_line_bytes = max_lines, max_bytes, max_line_bytes
        self._lines: collections.deque[str] = collections.deque()
        self._bytes = 0
        self._lock = threading.Lock()
        self._subs: list[Subscriber] = []
        self.dropped = 0  # lines pushed out by the bounds
        self.subscriber_errors = 0  # calls of a subscriber that raised (the first one is logged)
        self.closed = threading.Event()  # set when the feeding pipe reached EOF

    def append(self, line: str) -> None:
        """Add one line (truncated to ``max_line_bytes``), evicting the oldest as needed."""
        if len(line) > self.max_line_bytes:
            line = line[: self.max_line_bytes] + "…"
        with self._lock:
            self._lines.append(line)
            self._bytes += len(line)
            while len(self._lines) > self.max_lines or (self._bytes > self.max_bytes and len(self._lines) > 1):
                self._bytes -= len(self._lines.popleft())
                self.dropped += 1
            subs = tuple(self._subs)
        for sub in subs:
            try:
                sub(line)
            except Exception:  # noqa: BLE001 (a broken subscriber must not stop the reader, nor the others)
                self.subscriber_errors += 1
                if self.subscriber_errors == 1:
                    log.exception("log subscriber %r failed (later failures are counted in subscriber_errors)", sub)

    def tail(self, n: int = 20) -> list[str]:
        """The last ``n`` lines (fewer if there are fewer)."""
        with self._lock:
            return list(self._lines)[-n:] if n > 0 else []

    def lines(self) -> list[str]:
        """Every line still held."""
        with self._lock:
            return list(self._lines)

    def subscribe(self, fn: Subscriber, replay: bool = False) -> Callable[[], None]:
        """Call ``fn(line)`` for every new line (and first for held ones if ``replay``);
        returns a function that unsubscribes."""
        with self._lock:
            held = list(self._lines) if replay else []
            self._subs.append(fn)
        for line in held:
            fn(line)

        def cancel() -> None:
            with self._lock:
                if fn in self._subs:
                    self._subs.remove(fn)
        return cancel

    def pump(self, stream: IO[bytes], name: str = "lemonpack-log") -> threading.Thread:
        """Start a daemon thread that reads ``stream`` line by line into this ring until EOF
        (then sets :attr:`closed` and closes the stream)."""

        def run() -> None:
            try:
                for raw in iter(stream.readline, b""):
                    self.append(raw.decode("utf-8", "replace").rstrip("\r\n"))
            except (OSError, ValueError):
                pass
            finally:
                try:
                    stream.close()
                except OSError:
                    pass
                self.closed.set()

        t = threading.Thread(target=run, name=name, daemon=True)
        t.start()
        return t


__all__ = ["LogRing", "Subscriber"]
